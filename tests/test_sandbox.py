"""The grader's sandbox holds as root (issue 33): each attack of tests/attacks_sandbox.py run in
kernels confined by `Sandbox.submission`, as `collapse grade` starts them, and its effect seen
from the grader; and the gradebook, which no submission and no dying worker can spoil.

Kernels are started directly (a few seconds each), not by grading notebooks: two submissions at
once (as with --jobs 2) whose first tries every escape on the second and on the grader, then a
submission that leaves processes and a startup file behind, then one past its time limit.
"""

import asyncio
import contextlib
import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import attacks_sandbox as attacks
import pytest
from conftest import without_network

import collapse
from collapse.book import grading, runner, sandbox
from collapse.checks import ParameterError

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = Path(collapse.__file__).resolve().parent
SECRET = "grader-secret-7f3a"  # in the grader's environment while kernels start


class Kernel:
    """A kernel confined as one submission's, in `box`: `run(code)` -> what it printed, or the
    exception that ended the wait; leaving ends the submission (every process killed)."""

    def __init__(self, box: sandbox.Sandbox):
        self.box, self.loop = box, asyncio.new_event_loop()
        self.stack = contextlib.ExitStack()

    def __enter__(self):
        folder = self.stack.enter_context(tempfile.TemporaryDirectory(prefix="collapse-grade-"))
        self.work, out = Path(folder) / "work", Path(folder) / "out"
        self.work.mkdir(mode=0o700)
        out.mkdir(mode=0o700)
        try:
            self.confined = self.stack.enter_context(self.box.submission(self.work, out))
            self.manager = self.confined.kernel_manager_class(kernel_name="python3")
            self.loop.run_until_complete(self.manager.start_kernel(cwd=str(self.work)))
            self.client = self.manager.client()
            self.client.start_channels()
            self.loop.run_until_complete(self.client.wait_for_ready(timeout=60))
        except BaseException:
            self.stack.close()
            raise
        self.uid = self.work.stat().st_uid
        return self

    def run(self, code: str, timeout: float = 60) -> str:
        printed = []

        def hook(message):
            content = message["content"]
            if message["msg_type"] == "stream":
                printed.append(content["text"])
            elif message["msg_type"] == "error":
                printed.append(f"{content['ename']}: {content['evalue']}")

        execute = self.client.execute_interactive(code, output_hook=hook, timeout=timeout)
        try:
            self.loop.run_until_complete(execute)
        except Exception as err:  # noqa: BLE001 (the kernel died or took too long: the effect)
            printed.append(f"{type(err).__name__}")
        return "".join(printed)

    def json(self, code: str, **values):
        return json.loads(self.run(code.format(**values)).strip().splitlines()[-1])

    def alive_after(self, code: str, seconds: float) -> bool:
        """Send `code` and wait up to `seconds` for the kernel to die; whether it still lives."""
        self.client.execute(code)
        for _ in range(int(seconds * 5)):
            if not self.loop.run_until_complete(self.manager.is_alive()):
                return False
            self.loop.run_until_complete(asyncio.sleep(0.2))
        return True

    def __exit__(self, *exc):
        self.client.stop_channels()
        with contextlib.suppress(Exception):  # a kernel the attack killed is already gone
            self.loop.run_until_complete(self.manager.shutdown_kernel(now=True))
        self.stack.close()
        self.loop.close()


def _commands(uid: int) -> list[str]:
    """The command lines of the live processes of `uid`, as the grader sees them."""
    lines = []
    for pid in sandbox._processes_of(uid):
        with contextlib.suppress(OSError):
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return lines


def _left_after_stop(uid: int, settle: float = 10.0) -> list[str]:
    """`_commands(uid)` once the stop has had `settle` seconds to finish: a process killed a
    moment ago may still be exiting (its command line already empty) when first looked at."""
    deadline = time.monotonic() + settle
    while (left := _commands(uid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.fixture(scope="module")
def box():
    """The sandbox as `collapse grade --memory 1024 --processes 48` makes it, here."""
    made = sandbox.sandbox(ROOT, 1024, processes=48, max_time=300)
    if made.user != "uid" or made.namespaces != {"net", "pid", "ipc", "mount"}:
        pytest.skip(f"SKIPPED LOUDLY: this machine refuses part of the sandbox: {made.describe()}")
    return made


@pytest.fixture(scope="module")
def neighbours(box, tmp_path_factory):
    """Two submissions at once: the first tries every escape of the issue on the grader and on
    the second. -> (the first's findings, the second kernel's answers after it, their uids,
    the gradebook's text after, the grader's sentinel process alive after)."""
    book = tmp_path_factory.mktemp("grades") / "grades.csv"
    book.write_text("file,total\n")
    sentinel = subprocess.Popen(["sleep", "300"])  # a grader's process in the grader's view
    os.environ[SECRET] = SECRET
    try:
        with Kernel(box) as victim, Kernel(box) as attacker:
            victim_pids = sandbox._processes_of(victim.uid)
            found = attacker.json(
                attacks.ESCAPE, grader=os.getpid(), library=LIBRARY, secret=SECRET,
                chapter=ROOT / "notebooks" / "01-mask-radius.md", gradebook=book,
                neighbour_connection=victim.work / "kernel.json", neighbour_work=victim.work,
                neighbour_pid=max(victim_pids), grader_home=Path.home())  # fmt: skip
            attacker.alive_after("import subprocess; subprocess.run('kill -9 -1', shell=True)", 5)
            after = victim.run("print(6 * 7)")
            uids = (attacker.uid, victim.uid)
        alive = sentinel.poll() is None
    finally:
        del os.environ[SECRET]
        sentinel.kill()
        sentinel.wait()
    return found, after, uids, book.read_text(), alive


@pytest.mark.execution
def test_a_kernel_runs_as_a_user_of_its_own_without_capabilities(neighbours):
    found, _, uids, _, _ = neighbours
    assert found["uid"] == uids[0] and uids[0] != uids[1]
    assert all(sandbox.FIRST_UID <= u < sandbox.FIRST_UID + sandbox.SLOTS for u in uids)
    assert found["nsenter_grader"] != 0 and found["nsenter_parent"] != 0
    assert found["remount"] != 0 and found["write_library"] in ("OSError", "PermissionError")
    assert found["work_mode"] == "0o700"


@pytest.mark.execution
def test_a_kernel_sees_neither_the_sources_nor_the_grader(neighbours):
    found, _, _, _, _ = neighbours
    assert found["notebooks"] == [] and found["chapter"] is False
    assert found["grader_environ"] in ("FileNotFoundError", "PermissionError")
    assert found["own_environ"] is False
    python = Path(sys.base_prefix).resolve()  # mounted back where it lives, ~/.pyenv here
    assert all(python.is_relative_to(Path.home() / name) for name in found["grader_home"])
    assert found["ppid"] == 1 and max(found["processes"]) < 100  # its own PID namespace


@pytest.mark.execution
def test_a_kernel_reaches_neither_its_neighbour_nor_the_grader(neighbours):
    found, after, _, book, alive = neighbours
    assert found["neighbour_connection"] == "FileNotFoundError"
    assert found["neighbour_work"] is False
    # a fresh /tmp: only the folders of its own work and HOME, mounted back (and the project's
    # own, hidden, where the checkout lies under /tmp)
    shown = [name for name in found["tmp"] if Path("/tmp", name) not in (ROOT, *ROOT.parents)]
    assert [name.split("-")[1] for name in shown] == ["grade", "private"]
    assert found["neighbour_kill"] in ("ProcessLookupError", "PermissionError")
    assert found["grader_kill"] in ("ProcessLookupError", "PermissionError")
    assert found["parent_kill"] == "PermissionError"
    assert found["gradebook"] in ("FileNotFoundError", "PermissionError")
    assert after.strip() == "42", "the neighbour's kernel was harmed"
    assert alive and book == "file,total\n"


@pytest.mark.execution
def test_nothing_of_a_submission_outlives_it(box, tmp_path):
    """Processes left behind (a new session, a double fork writing the gradebook 3 s later) and
    a startup file in ~/.ipython: none reaches the next submission or the grader."""
    book = tmp_path / "grades.csv"
    book.write_text("file,total\n")
    startup = Path.home() / ".ipython/profile_default/startup/00-student.py"
    with Kernel(box) as first:
        left, start = first.json(attacks.LEFT_BEHIND, gradebook=book), time.monotonic()
        planted = first.json(attacks.STARTUP, grader_home=Path.home())
        uid, private = first.uid, first.run("import os; print(os.environ['HOME'])").strip()
        assert any("sleep 600" in c for c in _commands(uid)), "it runs until the end"
    assert left["uid"] == uid and _commands(uid) == []
    assert planted["grader_home"] in ("PermissionError", "OSError") and not startup.exists()
    assert not Path(private).exists()
    with Kernel(box) as second:
        assert second.run("print('PLANTED' in dir())").strip() == "False"
    time.sleep(max(0.0, start + 4 - time.monotonic()))
    assert book.read_text() == "file,total\n"  # 3 s have passed: the forger is gone


@pytest.mark.execution
def test_limits_hold_for_the_whole_submission(box):
    """A fork bomb stops at --processes; three children of 400 MB under --memory 1024 are
    stopped together (a limit per process would let each live); torch loads under 1024 MB."""
    with Kernel(box) as kernel:
        bomb = kernel.json(attacks.FORK_BOMB)
        children = kernel.json(attacks.MEMORY, mb=400)
        torch = kernel.json(attacks.TORCH)
        stopped = kernel.confined.stopped
    assert bomb["error"] == "BlockingIOError" and 0 < bomb["forked"] < box.processes
    assert torch == {"torch": 3.0, "right": True}
    assert -signal.SIGKILL in children, children
    assert stopped == "stopped at the 1024 MB memory limit per submission"


@pytest.mark.execution
def test_a_submission_is_stopped_at_its_time_limit(box):
    """The limit counts from the submission's start, the kernel's start included: 8 s leave a
    busy machine time to start the kernel before the limit."""
    with Kernel(dataclasses.replace(box, max_time=8)) as kernel:
        assert kernel.run("print('ready')").strip() == "ready"
        assert not kernel.alive_after("import time; time.sleep(60)", 15)
        stopped, uid = kernel.confined.stopped, kernel.uid
        assert _left_after_stop(uid) == []
    assert stopped == "stopped at the 8 s limit per submission"


def test_a_watchdog_that_fired_ends_before_its_uid_is_freed(monkeypatch, tmp_path):
    """The watchdog's sweep of the uid, slow on a busy machine, is over when the submission
    ends: the next submission takes the same uid, and a sweep still under way killed its kernel
    as it started (CI: "Kernel died before replying to kernel_info" after the time-limit test)."""
    events, sweep = [], sandbox._kill

    def slow_sweep(group, uid):
        if isinstance(threading.current_thread(), threading.Timer):
            time.sleep(1.0)  # the machine is busy
            events.append("watchdog's sweep over")
        sweep(group, uid)

    monkeypatch.setattr(sandbox, "_kill", slow_sweep)
    made = sandbox.sandbox(ROOT, 1024, processes=48, max_time=1)
    (tmp_path / "work").mkdir(mode=0o700)
    (tmp_path / "out").mkdir(mode=0o700)
    with made.submission(tmp_path / "work", tmp_path / "out") as confined:
        deadline = time.monotonic() + 60
        while confined.stopped is None and time.monotonic() < deadline:
            time.sleep(0.05)
    events.append("submission over")
    assert confined.stopped == "stopped at the 1 s limit per submission"
    assert events == ["watchdog's sweep over", "submission over"]


@pytest.mark.execution
def test_a_cell_is_still_interrupted(box):
    """The kernel is the namespace's second process: the grader's interrupt still reaches it."""
    with Kernel(box) as kernel:
        execute = kernel.client.execute(  # as the grader asks: an error aborts no later request
            "print('looping', flush=True)\nwhile True:\n    pass", stop_on_error=False
        )
        message = {"parent_header": {}, "msg_type": ""}
        while message["msg_type"] != "stream":  # the loop has started
            message = kernel.loop.run_until_complete(kernel.client.get_iopub_msg(timeout=30))
        kernel.loop.run_until_complete(kernel.manager.interrupt_kernel())
        reply = {"parent_header": {}}
        while reply["parent_header"].get("msg_id") != execute:  # past kernel_info's reply
            reply = kernel.loop.run_until_complete(kernel.client.get_shell_msg(timeout=30))
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        after = kernel.run("print('alive')")
        assert after.strip() == "alive", after


def test_a_uid_held_here_is_not_given_to_a_grader_in_another_network_namespace(box):
    """Tests and offline runs grade under `unshare -n`: were the uids held by a name of that
    namespace only, two graders would share one, and the first to finish would kill the
    other's kernel (its sweep of the uid)."""
    take = "from collapse.book import sandbox\nwith sandbox._slot('uid') as uid:\n    print(uid)"
    with sandbox._slot(box.user) as held:
        other = subprocess.run(
            without_network([sys.executable, "-c", take]), capture_output=True, text=True
        )
    assert other.returncode == 0, other.stderr
    assert int(other.stdout) != held


def test_the_first_line_names_what_the_machine_refused():
    made = sandbox.sandbox(ROOT, 1024)
    weak = dataclasses.replace(made, user="", namespaces=frozenset(), cgroup="")
    line = weak.describe()
    for refused in ("KERNELS AS THE GRADER'S USER", "NETWORK NOT ISOLATED", "NO PID NAMESPACE",
                    "PROJECT VISIBLE", "PER PROCESS (rlimits"):  # fmt: skip
        assert refused in line
    assert "prlimit" in " ".join(weak.prefix(Path("/w/work"), Path("/w/out"), None, Path("/p")))


def test_limits_are_checked():
    for values, name in [
        (dict(memory_mb=255), "--memory"),
        (dict(processes=15), "--processes"),
        (dict(max_time=0), "--max-time"),
        (dict(max_time=1.5), "--max-time"),
    ]:
        with pytest.raises(ParameterError, match=name):
            sandbox.sandbox(ROOT, **{"memory_mb": 1024, **values})
    with sandbox.limits(processes=32, max_time=7):
        made = sandbox.sandbox(ROOT, 512)
    assert (made.processes, made.max_time) == (32, 7)


def test_the_kernel_environment_is_the_submission_s_own(tmp_path):
    env = dict(item.split("=", 1) for item in sandbox._environment(tmp_path))
    home = str(tmp_path / "home")
    for name in ("HOME", "IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "MPLCONFIGDIR",
                 "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):  # fmt: skip
        assert env[name].startswith(home), name
    assert SECRET not in env and not any(k.startswith("GITHUB") for k in env)


# --- the gradebook -----------------------------------------------------------------------------


def test_the_gradebook_follows_no_link_planted_beside_it(tmp_path):
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n")
    book = tmp_path / "grades.csv"
    (tmp_path / ".grades.csv.partial").symlink_to(target)  # the planted name
    grading.write_gradebook("file,total\n", book)
    assert book.read_text() == "file,total\n" and target.read_text() == "root:x:0:0\n"
    assert not book.is_symlink() and oct(book.stat().st_mode & 0o777) == "0o600"
    (tmp_path / ".grades.csv.partial").unlink()
    (tmp_path / ".grades.csv.partial").mkdir()  # a folder there lost a whole class before
    grading.write_gradebook("file,total\na.ipynb,5\n", book)
    assert book.read_text() == "file,total\na.ipynb,5\n"
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    with pytest.raises(ParameterError, match="a symbolic link"):
        grading.gradebook_path(link)


def test_a_dying_worker_costs_only_its_own_row_and_rows_are_written_as_they_finish(tmp_path):
    files = [tmp_path / name for name in ("a.ipynb", "die.ipynb", "b.ipynb", "c.ipynb")]
    book, seen = tmp_path / "grades.csv", []

    def report(grade):
        seen.append(sum(1 for _ in csv.DictReader(book.open())))

    project = runner.Project(ROOT)
    grades = grading.grade_class(project, files, jobs=2, book=book, report=report,
                                 worker=attacks.dying_worker)  # fmt: skip
    rows = {Path(r["file"]).name: r for r in csv.DictReader(book.open())}
    assert "BrokenProcessPool" in rows["die.ipynb"]["error"]
    assert all(rows[n]["error"] == "" for n in ("a.ipynb", "b.ipynb", "c.ipynb"))
    assert sorted(seen) == [1, 2, 3, 4]  # the gradebook after each row: those finished
    assert [g.file for g in grades] == [f.name for f in files]


def test_attack_rows_are_checked():
    rows = {name: {"total": "0", "error": ""} for name in [*attacks.ATTACKS, "unsolved"]}
    assert attacks.check_rows(rows) == []
    rows["attack_source"] = {"total": "5", "error": ""}
    del rows["attack_killer"]
    assert attacks.check_rows(rows) == [
        "attack_source: '5' points, more than 0: ",
        "attack_killer: no row",
    ]
