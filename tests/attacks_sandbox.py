"""Attacks on the grader's sandbox (issue 33): snippets a confined kernel runs, and graded
submissions of chapter 01's assignment, as data.

`SNIPPETS` are run by tests/test_sandbox.py in kernels started through `Sandbox.submission`;
each prints one JSON object. `ATTACKS` are submissions for a graded class: `{name: (answer,
edit)}` as `test_grading.answered` takes them (the answer replaces the stub; None keeps it).
Each answer is unsolved, and defines the solution only if its attack worked, so that its row
scores more than the unsolved one exactly when the sandbox failed; `check_rows(rows)` says so.
This module is light (no torch) because a grader's worker process imports it in one test.
"""

import os
import textwrap
from pathlib import Path

# chapter 01's answer, defined by an attack only when it got out of the sandbox
SOLVED = """\
def window_radius(n, w, causal):
    farthest = n - 1 if causal else n // 2
    return math.ceil(farthest / w)
"""


def _if(worked: str, attack: str) -> str:
    """An answer cell: `attack`, then the solution if the expression `worked` is true."""
    solved = textwrap.indent(SOLVED, "    ")
    return f"{textwrap.dedent(attack)}\nif {worked}:\n{solved}"


# --- snippets for a confined kernel (format with str.format: grader's values) ---------------

ESCAPE = """\
import json, os, subprocess, pathlib, collapse
def outcome(call):
    try:
        return call()
    except Exception as err:
        return type(err).__name__
def run(*command):
    return subprocess.run(command, capture_output=True).returncode
r = dict(uid=os.getuid(), ppid=os.getppid())
r["nsenter_grader"] = run("nsenter", "-t", "{grader}", "-m", "-n", "true")
r["nsenter_parent"] = run("nsenter", "-t", str(os.getppid()), "-m", "-n", "true")
r["remount"] = run("mount", "-o", "remount,rw", "{library}")
r["write_library"] = outcome(lambda: open("{library}/planted.py", "w").write("x"))
checkout = pathlib.Path(collapse.__file__).resolve().parents[1]
r["notebooks"] = sorted(str(p) for p in checkout.glob("notebooks/*.md"))
r["chapter"] = os.path.exists("{chapter}")
r["grader_environ"] = outcome(lambda: "{secret}" in open("/proc/{grader}/environ").read())
r["own_environ"] = "{secret}" in str(os.environ)
r["neighbour_connection"] = outcome(lambda: open("{neighbour_connection}").read())
r["neighbour_work"] = os.path.exists("{neighbour_work}")
r["neighbour_kill"] = outcome(lambda: os.kill({neighbour_pid}, 9))
r["grader_kill"] = outcome(lambda: os.kill({grader}, 9))
r["parent_kill"] = outcome(lambda: os.kill(os.getppid(), 9))
r["gradebook"] = outcome(lambda: open("{gradebook}", "w").write("forged"))
r["grader_home"] = outcome(lambda: os.listdir("{grader_home}"))
r["processes"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
r["tmp"] = sorted(os.listdir("/tmp"))
r["work_mode"] = oct(os.stat(".").st_mode & 0o777)
print(json.dumps(r))
"""

STARTUP = """\
import json, os, pathlib
startup = pathlib.Path.home() / ".ipython/profile_default/startup"
startup.mkdir(parents=True, exist_ok=True)
(startup / "00-student.py").write_text("PLANTED = 1\\n")
try:
    grader = pathlib.Path("{grader_home}/.ipython/profile_default/startup")
    grader.mkdir(parents=True, exist_ok=True)
    (grader / "00-student.py").write_text("PLANTED = 1\\n")
    wrote = True
except OSError as err:
    wrote = type(err).__name__
print(json.dumps(dict(home=str(pathlib.Path.home()), grader_home=wrote)))
"""

LEFT_BEHIND = """\
import json, os, subprocess, time
subprocess.Popen(["sleep", "600"], start_new_session=True)
if os.fork() == 0:  # a double fork: the grandchild is nobody's child
    if os.fork() == 0:
        os.setsid()
        time.sleep(3)
        try:
            open("{gradebook}", "w").write("forged")
        finally:
            os._exit(0)
    os._exit(0)
os.wait()
print(json.dumps(dict(uid=os.getuid())))
"""

FORK_BOMB = """\
import json, os, time
children, error = [], None
while len(children) < 2000:
    try:
        pid = os.fork()
    except OSError as err:
        error = type(err).__name__
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
print(json.dumps(dict(forked=len(children), error=error)))
"""

# three children of `mb` MB each, resident at once: more than the submission's limit together
MEMORY = """\
import json, subprocess, sys
child = "import numpy, time; a = numpy.ones({mb} << 17); time.sleep(4); print('alive')"
children = [subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE)
            for _ in range(3)]
print(json.dumps([c.wait() for c in children]))
"""

TORCH = f"""\
import json, math, torch
from collapse import masks
{SOLVED}
mask = masks.make("causal_sliding_window", 64, window=8)
print(json.dumps(dict(torch=float(torch.ones(3).sum()),
                      right=window_radius(64, 8, True) == masks.radius(mask))))
"""

# --- graded submissions ---------------------------------------------------------------------

_NEIGHBOUR = """\
import glob, os, signal
from jupyter_client import BlockingKernelClient
for path in glob.glob("/tmp/collapse-grade-*/work/kernel.json"):
    client = BlockingKernelClient(connection_file=path)
    client.load_connection_file()
    client.start_channels()
    client.execute("window_radius = None")
for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
    if pid not in (1, os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""

_LEFT_BEHIND = """\
import os, time
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        time.sleep(20)
        for guess in ("grades.csv", "../grades.csv", "../../grades.csv", "/tmp/grades.csv"):
            try:
                open(guess, "w").write("file,total\\nleftover.ipynb,100\\n")
            except OSError:
                pass
        os._exit(0)
    os._exit(0)
os.wait()
"""

_STARTUP = f"""\
import os, pathlib
planted = '''
import math
{SOLVED}
get_ipython().events.register(
    "post_execute", lambda: get_ipython().user_ns.update(window_radius=window_radius))
'''
for home in (pathlib.Path.home(), pathlib.Path(os.path.expanduser("~root"))):
    try:
        folder = home / ".ipython/profile_default/startup"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "00-student.py").write_text(planted)
    except OSError:
        pass
"""

_SOURCE = """\
import pathlib, re, collapse
found = False
for chapter in pathlib.Path(collapse.__file__).resolve().parents[1].glob("notebooks/01-*.md"):
    found = "def window_radius" in chapter.read_text()
"""

_NSENTER = """\
import os, subprocess
enter = ["nsenter", "-m", "-n", "-t"]
escaped = any(subprocess.run([*enter, str(p), "true"]).returncode == 0 for p in (os.getppid(), 1))
"""

_REMOUNT = """\
import subprocess, collapse, pathlib
library = str(pathlib.Path(collapse.__file__).parent)
writable = subprocess.run(["mount", "-o", "remount,rw", library]).returncode == 0
"""

_KILLER = """\
import os, subprocess
subprocess.run("kill -9 -1", shell=True)
for kill in (lambda: os.kill(os.getppid(), 9), lambda: os.killpg(0, 9)):
    try:
        kill()
    except OSError:
        pass
"""

_FORK_BOMB = """\
import subprocess, sys
bomb = "import os, time\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n"
subprocess.Popen([sys.executable, "-c", bomb + "        time.sleep(1)"])
"""

_MEMORY = """\
import subprocess, sys
child = "import numpy, time; a = numpy.ones(1536 << 17); time.sleep(5)"
children = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(3)]
"""

ATTACKS = {
    # read the chapter's source (and its solution) beside the installed library
    "attack_source": (_if("found", _SOURCE), None),
    # enter the grader's namespaces: its pid is the kernel's parent, or 1
    "attack_nsenter": (_if("escaped", _NSENTER), None),
    # make the project writable again
    "attack_remount": (_if("writable", _REMOUNT), None),
    # the next submission gets the answer from ~/.ipython: the victim's name sorts last, so it
    # is graded after the attack (long after, in a class), with --jobs 2 too
    "attack_startup": (_STARTUP, None),
    "zz_startup_victim": (None, None),
    # a process that outlives the kernel and forges the gradebook 20 s later
    "attack_leftover": (_LEFT_BEHIND, None),
    # kill the grader: the kernel's parent, its process group, every process it may signal
    "attack_killer": (_KILLER, None),
    # processes without end: bounded by --processes, killed with the submission
    "attack_forkbomb": (_FORK_BOMB, None),
    # three children of 1.5 GB: the limit is the submission's, not each process's
    "attack_memory": (_if("all(c.wait() == 0 for c in children)", _MEMORY), None),
    # with --jobs 2: find the other kernel, redefine its answer, kill its processes
    "attack_neighbour": (_NEIGHBOUR, None),
}

UNSOLVED = "zz_startup_victim"  # scores what an unsolved submission scores


def refused(box) -> dict:
    """The attacks whose defence this machine refuses (`box`, a Sandbox; its first line says
    so too), with the reason: {name: reason}. A test skips them loudly rather than fail."""
    unprivileged = box.user != ""
    defences = {
        "attack_source": (box.readonly, "no mount namespace: the project is visible"),
        "attack_memory": (bool(box.cgroup), "no cgroup: memory is limited per process"),
        "attack_leftover": (
            unprivileged or "pid" in box.namespaces, "neither a uid nor a PID namespace"),
    }  # fmt: skip
    for name in ("attack_nsenter", "attack_remount", "attack_startup", "attack_killer",
                 "attack_neighbour", "attack_forkbomb"):  # fmt: skip
        defences[name] = (unprivileged, "kernels run as the grader's user")
    return {name: reason for name, (held, reason) in defences.items() if not held}


def check_rows(rows: dict, unsolved: str = "unsolved", skip=()) -> list[str]:
    """What went wrong in a graded class holding `ATTACKS` (rows by file stem, as
    test_grading.read_csv gives them) and an unsolved submission: every attack's row present
    and scoring at most the unsolved one, but those in `skip`. -> one line per fault (none:
    the sandbox held)."""
    faults = []
    floor = int(rows[unsolved]["total"])
    for name in ATTACKS:
        row = rows.get(name)
        if row is None:
            faults.append(f"{name}: no row")
        elif name not in skip and (row["total"] == "" or int(row["total"]) > floor):
            faults.append(f"{name}: {row['total']!r} points, more than {floor}: {row['error']}")
    return faults


def dying_worker(root: str, path: str, *args):
    """A grading worker that dies on a file named `die*` (as one killed by the OOM killer or a
    signal would), and grades every other file as an empty row: for grade_class's test."""
    from collapse.book.grading import Grade

    if Path(path).name.startswith("die"):
        os._exit(9)
    return Grade(Path(path).name, notebook="01-mask-radius")
