"""The sandbox a submission's kernel runs in while `collapse grade` grades it.

`sandbox(root, ...)` probes once what this machine allows and returns a `Sandbox`; for each
submission, `Sandbox.submission(work, protect)` is a context in which a kernel is started
confined (its connection file and ipc sockets under `work`), and on leaving it every process
the submission started is gone. `Sandbox.describe()` is the first line `collapse grade`
prints: what is confined and what the machine refused.

As root, a kernel runs as a uid of its own (61000 and up: no account, no process, one per
submission graded at once) with no capabilities and `no_new_privs`; otherwise in a user
namespace without capabilities. Where the machine allows, it also has its own network (none),
PID (it sees and signals only its own processes, which all die with it), IPC and mount
namespaces; in the last, the project, the library's checkout and the grader's home are empty
folders (only the library, the Python environment and the kernel's own folders are mounted
back, read-only but for those folders), and /tmp, /var/tmp, /dev/shm and /run/lock are
fresh and empty. HOME and TMPDIR are folders made for the submission and removed after it.
Memory and processes are limited for all of the submission's processes together by a
cgroup (v2 when delegated, else v1), else per process by rlimits; a watchdog ends the
submission at its wall-clock limit.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import functools
import grp
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..checks import ParameterError, check_int
from . import runner

__all__ = ["Sandbox", "Confinement", "sandbox", "limits"]

FIRST_UID = 61000  # a submission's kernel runs as FIRST_UID + its slot (as root)
SLOTS = 1000  # uids tried from FIRST_UID
SLOT_LOCKS = Path("/run/collapse-grade")  # a lock file per uid in use (`_slot`), root's alone
# Folders anyone may write: each gets a fresh, empty tmpfs in a kernel's mount namespace.
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
# Thread pools sized by the machine (64 cores: 64 threads) would hit the process limit, which
# counts threads; one submission needs no more than one core's pool.
_ONE_THREAD = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_PASSED = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "COLLAPSE_SEED_FAMILY")  # kept as given
_DROP = ["--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]
_SETTLE = 10.0  # seconds to wait for killed processes to be gone
_LIMITS = contextvars.ContextVar("limits", default=None)  # sandbox()'s defaults, see limits()


@dataclass(frozen=True)
class Sandbox:
    """How a submission's kernel is confined, as this machine allows.

    user: "uid" (as root: a free uid per submission, via setpriv), "userns" (a user namespace,
    no capabilities) or "" (refused: the grader's own user). namespaces: those of "net",
    "pid", "ipc", "mount" the machine allows. cgroup: "v2", "v1" or "" (then rlimits)."""

    root: Path
    memory_mb: int
    processes: int
    max_time: int
    user: str
    namespaces: frozenset
    cgroup: str
    cgroup_parents: tuple = ()

    @property
    def offline(self) -> bool:
        return "net" in self.namespaces

    @property
    def readonly(self) -> bool:
        """Whether the project is out of the kernel's sight (hidden, so not writable either)."""
        return "mount" in self.namespaces

    def describe(self) -> str:
        """One line: what confines a kernel here, and in capitals what the machine refused."""
        user = {
            "uid": f"kernels as uids {FIRST_UID}+ (setpriv: no capabilities, no_new_privs)",
            "userns": "kernels in a user namespace (no capabilities, no_new_privs)",
            "": "KERNELS AS THE GRADER'S USER (no other user can run them here)",
        }[self.user]
        parts = [
            user,
            "no network (unshare -n)" if self.offline
            else "NETWORK NOT ISOLATED (unshare -n is not permitted here)",
            "own PID namespace (unshare -p)" if "pid" in self.namespaces
            else "NO PID NAMESPACE (unshare -p is not permitted here)",
            "project hidden, private HOME and /tmp (unshare -m)" if self.readonly
            else "PROJECT VISIBLE (a mount namespace is not permitted here), private HOME",
        ]  # fmt: skip
        limited = f"{self.memory_mb} MB and {self.processes} processes per submission"
        if self.cgroup:
            parts.append(f"{limited} (cgroup {self.cgroup})")
        else:
            parts.append(
                f"{self.memory_mb} MB and {self.processes} processes PER PROCESS "
                "(rlimits: no writable cgroup here)"
            )
        parts.append(f"{self.max_time} s per submission")
        return ", ".join(parts)

    @contextlib.contextmanager
    def submission(self, work: Path, protect: Path) -> Iterator[Confinement]:
        """A `Confinement` for one submission whose kernel lives in `work` (a fresh folder);
        `protect` (the grader's output folder) is out of the kernel's sight. On leaving, every
        process of the submission is killed, its cgroup and private folders removed."""
        work, protect = Path(work).resolve(), Path(protect).resolve()
        with _slot(self.user) as uid, _private(uid, work) as private:
            group = _Cgroup.make(self, uid)
            confined = Confinement(None, _cgroup=group, _memory_mb=self.memory_mb)
            confined.kernel_manager_class = confined._watched(
                runner.kernel_manager(
                    self.prefix(work, protect, uid, private, group),
                    transport="ipc",
                    ip=str(work / "kernel"),
                    connection_file=str(work / "kernel.json"),
                )
            )
            watchdog = threading.Timer(self.max_time, confined._expire, args=(self.max_time, uid))
            watchdog.daemon = True
            watchdog.start()
            try:
                yield confined
            finally:
                watchdog.cancel()
                watchdog.join()  # one that fired ends its sweep of the uid before it is freed
                _end(group, uid)

    def prefix(self, work: Path, protect: Path, uid, private: Path, group=None) -> list[str]:
        """The command a kernel is started under: join the cgroup, enter the namespaces, mount
        the view (in the mount namespace), drop to the kernel's user, clean the environment."""
        outer = [f"echo 0 > {shlex.quote(str(d / 'cgroup.procs'))}" for d in group.dirs] \
            if group else []  # fmt: skip
        flags = {"net": "-n", "ipc": "-i", "mount": "-m"}
        unshare = ["unshare", *(["-U", "-r"] if self.user == "userns" else [])]
        unshare += [flags[n] for n in sorted(self.namespaces) if n in flags]
        if "pid" in self.namespaces:
            unshare += ["-p", "-f", "--kill-child", "--mount-proc"]
        inner = ["umask 022"]
        if "mount" in self.namespaces:
            inner += _mounts(self.root, work, protect, private)
        if uid is not None:  # the grader wrote it, readable by its owner alone: the kernel
            chown = shlex.quote(_tool("chown"))
            inner.append(f"{chown} {uid}:{uid} {shlex.quote(str(work / 'kernel.json'))}")
        run = [*self._drop(uid), _tool("env"), "-i", *_environment(private)]
        run = " ".join(map(shlex.quote, run)) + ' "$@"'
        # a PID namespace's first process stays root and waits: when it ends, all end
        inner.append(f"{run}; exit $?" if "pid" in self.namespaces else f"exec {run}")
        if len(unshare) > 1:
            command = [*unshare, "sh", "-c", " && ".join(inner), "sh"]
        else:
            command = ["sh", "-c", " && ".join(inner), "sh"]
        # the kernel dies with the grader's process that started it (setpriv --pdeathsig)
        launch = " ".join(map(shlex.quote, ["setpriv", "--pdeathsig", "KILL", *command]))
        return ["sh", "-c", " && ".join([*outer, f'exec {launch} "$@"']), "sh"]

    def _drop(self, uid) -> list[str]:
        """The command that runs the kernel without privileges: setpriv to `uid` (as root),
        or no capabilities in the user namespace; the rlimits where no cgroup limits."""
        limits = [f"--as={self.memory_mb << 20}", f"--nproc={self.processes}"]
        rlimits = [] if self.cgroup else [_tool("prlimit"), *limits]
        if self.user == "uid":
            ids = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            return [*rlimits, _tool("setpriv"), *ids, *_DROP]
        if self.user == "userns":
            bits = "+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked"
            return [*rlimits, _tool("setpriv"), f"--securebits={bits}", *_DROP]
        return rlimits


@dataclass
class Confinement:
    """One submission's confinement: the kernel manager class that starts its kernel, and why
    the sandbox stopped it (`stopped`: None while it runs within its limits)."""

    kernel_manager_class: type
    _cgroup: object = None
    _memory_mb: int = 0
    _expired: str | None = field(default=None, repr=False)
    _started: list = field(default_factory=list, repr=False)

    @property
    def stopped(self) -> str | None:
        """Why the sandbox stopped the submission: its wall-clock limit, or its memory limit
        (a process of it killed by the kernel's OOM killer)."""
        if self._expired:
            return self._expired
        if self._cgroup is not None and self._cgroup.oom_kills():
            return f"stopped at the {self._memory_mb} MB memory limit per submission"
        return None

    def _watched(self, manager: type) -> type:
        """`manager`, its kernels noted: the watchdog kills their process groups (the
        namespace's first process with them) even where no cgroup or uid holds them all."""
        started = self._started

        class Watched(manager):
            def __init__(self, **kw):
                super().__init__(**kw)
                started.append(self)

        return Watched

    def _expire(self, seconds: int, uid) -> None:
        """The watchdog: at the deadline, every process of the submission is killed."""
        self._expired = f"stopped at the {seconds} s limit per submission"
        for manager in self._started:
            pid = getattr(manager.provisioner, "pid", None)
            if pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        _kill(self._cgroup, uid)


def _environment(private: Path) -> list[str]:
    """The kernel's whole environment, `NAME=value`: a few of the grader's variables, and
    HOME, TMPDIR and every folder Jupyter, IPython, Matplotlib and XDG would use in the
    submission's private HOME (so the grader's ~/.ipython startup files are never run)."""
    home = private / "home"
    env = {k: os.environ[k] for k in _PASSED if k in os.environ}
    # the system's folders last: PATH's own may be hidden in the kernel's view (under /tmp)
    folders = [*env.get("PATH", "").split(os.pathsep), *os.defpath.split(os.pathsep)]
    env["PATH"] = os.pathsep.join(dict.fromkeys(f for f in folders if f))
    env |= {k: "1" for k in _ONE_THREAD}
    env |= {
        "HOME": home, "TMPDIR": private / "tmp", "IPYTHONDIR": home / ".ipython",
        "JUPYTER_CONFIG_DIR": home / ".jupyter", "JUPYTER_DATA_DIR": home / ".local/share/jupyter",
        "JUPYTER_RUNTIME_DIR": home / ".local/share/jupyter/runtime",
        "JUPYTER_PREFER_ENV_PATH": "1", "MPLCONFIGDIR": home / ".config/matplotlib",
        "XDG_CACHE_HOME": home / ".cache", "XDG_CONFIG_HOME": home / ".config",
        "XDG_DATA_HOME": home / ".local/share", "XDG_RUNTIME_DIR": private / "tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        "JPY_PARENT_PID": "1",  # no parent poller: its parent is the namespace's pid 1
    }  # fmt: skip
    return [f"{k}={v}" for k, v in env.items()]


@functools.cache
def _tool(name: str) -> str:
    """`name`'s real path (links resolved), for the commands that run after the mounts: a
    folder on PATH may be hidden by then (a PATH entry under /tmp, say)."""
    found = shutil.which(name)
    return os.path.realpath(found) if found else name


def _library() -> tuple[Path, Path | None]:
    """(the collapse package's folder, its checkout when installed editable, else None)."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent
    return package, None if checkout.name in ("site-packages", "dist-packages") else checkout


def _under(path: Path, folders) -> bool:
    return any(path == f or f in path.parents for f in folders)


def _mounts(root: Path, work: Path, protect: Path, private: Path) -> list[str]:
    """Shell commands (as root in the new mount namespace) that hide the project, the library's
    checkout, the grader's home and output, and the shared temporary folders, then mount back
    the library and Python read-only and `work` and `private` writable, at their own paths.

    Why file descriptors: a folder under a hidden one cannot be named once it is hidden, so
    each is opened first and mounted back from /proc/self/fd (mount -c: not by its name)."""
    package, checkout = _library()
    home = Path.home().resolve()
    hidden = [root, checkout, work.parent, protect, *([] if home == Path("/") else [home])]
    hidden = sorted({h for h in hidden if h is not None}, key=lambda p: len(p.parts))
    tmp = [Path(t) for t in SHARED_TMP if Path(t).is_dir() and not Path(t).is_symlink()]
    python = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), package}
    keep = [(p, "ro") for p in sorted(python) if _under(p, [*hidden, *tmp])]
    keep += [(work, "rw"), (private, "rw")]
    keep.sort(key=lambda k: len(k[0].parts))
    q = shlex.quote
    opened = " ".join(f"{fd}<{q(str(p))}" for fd, (p, _) in enumerate(keep, 3))
    lines = [f"exec {opened}"]
    mount, mkdir = q(_tool("mount")), q(_tool("mkdir"))
    lines += [f"{mount} -t tmpfs -o mode=1777,nosuid,nodev collapse-tmp {q(str(t))}" for t in tmp]
    lines += [f"{mkdir} -p {q(str(h))} && {mount} -t tmpfs -o mode=755,size=64k,nosuid,nodev "
              f"collapse-hidden {q(str(h))}" for h in hidden]  # fmt: skip
    for fd, (path, mode) in enumerate(keep, 3):
        ro = " -o ro" if mode == "ro" else ""
        lines.append(f"{mkdir} -p {q(str(path))} && {mount} -c --bind{ro} /proc/self/fd/{fd} "
                     f"{q(str(path))}")  # fmt: skip
    lines.append("exec " + " ".join(f"{fd}<&-" for fd in range(3, 3 + len(keep))))
    return lines


# --- the submission's user -------------------------------------------------------------------


def _processes_of(uid: int) -> list[int]:
    """The live processes (not zombies) whose real, effective, saved or file uid is `uid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:  # it ended meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").split()[:1] == ["Z"]:
            continue
        if str(uid) in fields.get("Uid", "").split():
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def _slot(user: str) -> Iterator[int | None]:
    """As root, a uid no account and no process has, held for this submission while it runs;
    else None.

    The hold is an exclusive lock (flock) on SLOT_LOCKS/<uid>: one per machine, shared by
    graders in other network namespaces too (an abstract socket's name is not: an offline
    grader, `unshare -n`, took the uid of a running one and its sweep killed that kernel),
    released by the kernel when its holder ends however it ends. The folder is root's alone."""
    if user != "uid":
        yield None
        return
    try:
        SLOT_LOCKS.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise ParameterError(f"kernel uids cannot be held: {SLOT_LOCKS}: {err.strerror}") from None
    for uid in range(FIRST_UID, FIRST_UID + SLOTS):
        if _known(uid):
            continue
        hold = os.open(SLOT_LOCKS / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(hold, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another submission holds it
            os.close(hold)
            continue
        try:
            if _processes_of(uid):  # a process we did not start: never ours to kill
                continue
            yield uid
            return
        finally:
            os.close(hold)
    raise ParameterError(f"no free uid in {FIRST_UID}..{FIRST_UID + SLOTS - 1} for a kernel")


def _known(uid: int) -> bool:
    """Whether an account or a group has this id."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


@contextlib.contextmanager
def _private(uid, work: Path) -> Iterator[Path]:
    """The submission's private folder (HOME and TMPDIR), and `work` made its kernel's alone
    (mode 0700, its owner); removed on leaving."""
    private = Path(tempfile.mkdtemp(prefix="collapse-private-")).resolve()
    try:
        os.chmod(private, 0o711)
        os.chmod(work.parent, 0o711)  # traversable, where no mount namespace remakes it
        for folder in (private / "home", private / "tmp", work):
            folder.mkdir(mode=0o700, exist_ok=True)
            if uid is not None:
                os.chown(folder, uid, uid)
            os.chmod(folder, 0o700)
        yield private
    finally:
        shutil.rmtree(private, ignore_errors=True)


# --- the submission's cgroup -------------------------------------------------------------------


@dataclass(frozen=True)
class _Cgroup:
    """The cgroup folders of one submission: one (v2), or its memory and pids folders (v1)."""

    version: str
    dirs: tuple

    @classmethod
    def make(cls, box: Sandbox, uid) -> _Cgroup | None:
        """A fresh cgroup with the sandbox's limits (None where none is writable)."""
        if not box.cgroup:
            return None
        name = f"collapse-grade-{uid if uid is not None else os.getpid()}"
        group = cls(box.cgroup, tuple(parent / name for parent in box.cgroup_parents))
        group.remove()  # one left by a grader that was killed: this slot is ours now
        for folder in group.dirs:
            folder.mkdir()
        group.limit(box.memory_mb, box.processes)
        return group

    def limit(self, memory_mb: int, processes: int) -> None:
        memory = str(memory_mb << 20)
        names = (
            {"memory.max": memory, "memory.swap.max": "0", "pids.max": str(processes)}
            if self.version == "v2"
            else {"memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory,
                  "pids.max": str(processes)}
        )  # fmt: skip
        for folder in self.dirs:
            for name, value in names.items():
                if (folder / name).exists():
                    (folder / name).write_text(value)

    def pids(self) -> set[int]:
        found = set()
        for folder in self.dirs:
            with contextlib.suppress(FileNotFoundError):
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        return found

    def oom_kills(self) -> int:
        """How many of its processes the OOM killer killed at the memory limit."""
        for folder in self.dirs:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    lines = (folder / name).read_text().splitlines()
                except FileNotFoundError:
                    continue
                counts = dict(line.split() for line in lines if len(line.split()) == 2)
                return int(counts.get("oom_kill", 0))
        return 0

    def kill(self) -> None:
        """SIGKILL to all of its processes, until none is left (a process forking meanwhile
        is in it too)."""
        kill = [d / "cgroup.kill" for d in self.dirs if (d / "cgroup.kill").exists()]
        if kill:
            kill[0].write_text("1")
        deadline = time.monotonic() + _SETTLE
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                _signal(pid)
            time.sleep(0.05)

    def remove(self) -> None:
        """Kill what is left in it, then remove its folders."""
        if not any(d.exists() for d in self.dirs):
            return
        self.kill()
        deadline = time.monotonic() + _SETTLE
        for folder in self.dirs:
            while folder.exists():
                try:
                    folder.rmdir()
                except OSError as err:  # EBUSY: a killed process is not reaped yet
                    if err.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)


def _signal(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _kill(group: _Cgroup | None, uid) -> None:
    """Every process of the submission killed: its cgroup's, then any left with its uid."""
    if group is not None:
        group.kill()
    if uid is None:
        return
    deadline = time.monotonic() + _SETTLE
    while (pids := _processes_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            _signal(pid)
        time.sleep(0.05)


def _end(group: _Cgroup | None, uid) -> None:
    """The submission's end: its processes killed, its cgroup removed."""
    _kill(group, uid)
    if group is not None:
        group.remove()


# --- what this machine allows ------------------------------------------------------------------


def _works(command: list[str]) -> bool:
    if shutil.which(command[0]) is None:
        return False
    try:
        return subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _mount_table() -> list[tuple[str, str, str, set]]:
    """(root, mount point, file system type, super options) of each mount, from mountinfo."""
    table = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, rest = before.split(), after.split()
        if len(fields) >= 5 and len(rest) >= 3:
            table.append((fields[3], fields[4], rest[0], set(rest[2].split(","))))
    return table


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per controller ("" for v2's unified hierarchy)."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def _cgroup_folder(mount: tuple, path: str) -> Path | None:
    root, point = mount[0], mount[1]
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    return Path(point) / path[len(root) :].lstrip("/")


def _cgroup_parents() -> tuple[str, tuple]:
    """("v2", (folder,)) where this process's cgroup2 folder delegates memory and pids to
    children, else ("v1", (memory folder, pids folder)) where both are writable, else ("",
    ()). The folders are this process's own cgroups: a submission's is nested in them."""
    try:
        table, own = _mount_table(), _own_cgroups()
    except OSError:
        return "", ()
    for mount in table:
        if mount[2] == "cgroup2" and "" in own:
            folder = _cgroup_folder(mount, own[""])
            try:
                enabled = (folder / "cgroup.subtree_control").read_text().split()
            except (OSError, TypeError):
                continue
            if {"memory", "pids"} <= set(enabled) and _can_make(("v2", (folder,))):
                return "v2", (folder,)
    found = {}
    for mount in table:
        for controller in ("memory", "pids"):
            if mount[2] == "cgroup" and controller in mount[3] and controller in own:
                found[controller] = _cgroup_folder(mount, own[controller])
    parents = (found.get("memory"), found.get("pids"))
    if None not in parents and _can_make(("v1", parents)):
        return "v1", parents
    return "", ()


def _can_make(kind: tuple) -> bool:
    """Whether a child cgroup can be made, limited and removed there."""
    group = _Cgroup(kind[0], tuple(p / f"collapse-probe-{os.getpid()}" for p in kind[1]))
    try:
        for folder in group.dirs:
            folder.mkdir()
        group.limit(256, 64)
        return True
    except OSError:
        return False
    finally:
        for folder in group.dirs:
            if folder.is_dir():
                folder.rmdir()


@functools.cache
def _probe() -> tuple[str, frozenset, str, tuple]:
    """(user, namespaces, cgroup version, cgroup parents): what this machine allows, tried
    once per process."""
    root = os.geteuid() == 0
    if root and _works(["setpriv", f"--reuid={FIRST_UID}", f"--regid={FIRST_UID}",
                        "--clear-groups", *_DROP, "true"]):  # fmt: skip
        user, base = "uid", ["unshare"]
    elif not root and _works(["unshare", "-U", "-r", "true"]):
        user, base = "userns", ["unshare", "-U", "-r"]
    else:
        user, base = "", ["unshare"]
    tries = {
        "net": ["-n", "true"],
        "ipc": ["-i", "true"],
        "mount": ["-m", "sh", "-c", "mount -t tmpfs collapse-probe /tmp"],
        "pid": ["-p", "-f", "--kill-child", "--mount-proc", "true"],
    }
    namespaces = frozenset(n for n, t in tries.items() if _works([*base, *t]))
    if not root and user != "userns":
        namespaces = frozenset()  # no user namespace: an unprivileged user can unshare none
    if user == "uid" and "mount" not in namespaces and not _works(
        ["setpriv", f"--reuid={FIRST_UID}", f"--regid={FIRST_UID}", "--clear-groups", *_DROP,
         sys.executable, "-c", "import collapse"]):  # fmt: skip
        user = ""  # Python or the library lies in a folder only the grader may enter
    return user, namespaces, *_cgroup_parents()


@contextlib.contextmanager
def limits(**values) -> Iterator[None]:
    """Within it, `sandbox()` takes these limits (processes, max_time) unless given them.

    Why: `grading.grade` makes its sandbox from `memory_mb` alone, in a worker process; the
    grader sets the others once around it."""
    token = _LIMITS.set({**(_LIMITS.get() or {}), **values})
    try:
        yield
    finally:
        _LIMITS.reset(token)


def sandbox(
    root: Path, memory_mb: int = 4096, *, processes: int | None = None,
    max_time: int | None = None,
) -> Sandbox:  # fmt: skip
    """The strongest confinement this machine allows for kernels grading in project `root`.

    Parameters
    ----------
    root : Path
        The project: out of a kernel's sight where a mount namespace is allowed.
    memory_mb : int
        MB of memory for all of a submission's processes together (at least 256).
    processes : int, optional
        Processes and threads of a submission together (at least 16; default 256, or as
        set by `limits`).
    max_time : int, optional
        Seconds a submission may run in all (at least 1; default 900, or as set by `limits`).

    Returns
    -------
    Sandbox
        Its `describe()` says what the machine refused.
    """
    memory_mb = check_int("--memory", memory_mb, minimum=256)
    given = _LIMITS.get() or {}
    processes = processes if processes is not None else given.get("processes", 256)
    max_time = max_time if max_time is not None else given.get("max_time", 900)
    processes = check_int("--processes", processes, minimum=16)
    max_time = check_int("--max-time", max_time, minimum=1)
    user, namespaces, version, parents = _probe()
    return Sandbox(Path(root).resolve(), memory_mb, processes, max_time, user, namespaces,
                   version, parents)  # fmt: skip
