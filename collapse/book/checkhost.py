"""The checks of a graded notebook, run in a grader-owned process instead of the student's kernel.

In a student's own Jupyter a check cell runs in the notebook like any other. At grading it does
not: a kernel the student controls could make any check pass (an answer whose `__eq__` is always
true, a silenced traceback, a rewritten `run_cell`, redefined builtins). `grading_client` executes
the notebook with nbclient and, when it reaches a check (always the chapter's own code), runs
that code in the check process (`python -m collapse.book.checkhost`, one per submission, started
fresh). There, the names the check reads are

- imported by the check process when the chapter imports them (`chapter_imports`);
- bound by an earlier check of the same submission, as in the book;
- otherwise fetched from the kernel at that moment as plain data (`collapse.book.wire`): values
  are rebuilt and type-checked, and the student's functions become `Remote` proxies whose calls
  send their arguments to the kernel and bring the result back the same way.

Nothing the student made, and no code of a check, enters the other side: the kernel only ever
sees "give me `window_radius`" and "call reference 3 with (4, 1)". Each request carries a fresh
nonce, its reply is read as hostile text, and it is bounded in size and in time (the grader's
time limit per cell: the kernel is interrupted and the check fails as timed out).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import functools
import json
import logging
import os
import queue
import secrets
import signal
import sys
import traceback
from pathlib import Path

from . import wire

__all__ = ["GradingStoppedError", "chapter_imports", "free_names", "grading_client", "main"]

_PROTOCOL_LIMIT = 4 * wire.REPLY_LIMIT  # one line between the grader and its check process
_STDERR_TAIL = 2000  # characters of the check process's stderr kept for a "grader error"
_INTERRUPT_WAIT = 10  # seconds an interrupted kernel has to finish a request
_OUTPUT_LIMIT = wire.REPLY_LIMIT + 4096  # a request's stdout: the reply, its nonces, a little more
_QUIET = logging.getLogger("collapse.book.checkhost.nbclient")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False
_STOPS = (signal.SIGINT, signal.SIGTERM)  # the signals that stop the grading


class GradingStoppedError(Exception):
    """The grader was asked to stop (SIGINT or SIGTERM) while a submission ran: the
    submission was not graded."""


def _python(cell_source: str) -> ast.Module | None:
    """A code cell parsed as Python (IPython's magics translated first); None if it is not."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        return ast.parse(TransformerManager().transform_cell(cell_source))
    except (SyntaxError, ValueError):
        return None


def chapter_imports(source) -> dict[str, list[str]]:
    """{name: the import statements that bind it} over the top-level imports of the chapter
    source's code cells: the check process imports these itself, never takes them from the
    kernel (where `masks` may be anything the student assigned)."""
    table: dict[str, list[str]] = {}
    for cell in source.cells:
        tree = _python(cell.source) if cell.cell_type == "code" else None
        for node in tree.body if tree else []:
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or getattr(node, "level", 0):
                continue
            for alias in node.names:
                if alias.name == "*":
                    continue
                one = type(node)(
                    names=[alias],
                    **(
                        {"module": node.module, "level": 0}
                        if isinstance(node, ast.ImportFrom)
                        else {}
                    ),
                )
                bound = alias.asname or alias.name.split(".")[0]
                table.setdefault(bound, []).append(ast.unparse(one))
    return table


def free_names(code: str) -> tuple[dict[str, list | None], set[str]]:
    """What a check's `code` reads but does not bind, and what it binds.

    -> ({name: None to read it whole, or the constant keys it is only ever indexed by}, bound).
    Why keys: `e["ln_weight"]` needs one tensor of a dict holding a vocabulary's embeddings."""
    tree = ast.parse(code)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bound, uses = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            parent = parents.get(node)
            constant = (
                isinstance(parent, ast.Subscript)
                and parent.value is node
                and isinstance(parent.slice, ast.Constant)
                and isinstance(parent.slice.value, (str, int))
            )
            uses.setdefault(node.id, []).append(parent.slice.value if constant else None)
        elif isinstance(node, ast.Name):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    free = {
        name: None if None in keys else sorted(set(keys), key=repr)
        for name, keys in uses.items()
        if name not in bound and not hasattr(builtins, name)
    }
    return free, bound


# --- the check process ------------------------------------------------------------------------


class Remote:
    """A student's function seen from the check process: a call is a request to the kernel,
    its arguments and result plain data."""

    def __init__(self, host: _Host, ref: int, name: str):
        self._host, self._ref, self._name = host, ref, name

    def __call__(self, *args, **kwargs):
        def reference(value):
            if isinstance(value, Remote):
                return value._ref
            raise wire.NotPlainDataError("a function of the check (only the student's cross)")

        request = {
            "call": self._ref,
            "args": [wire.encode(a, reference) for a in args],
            "kwargs": {str(k): wire.encode(v, reference) for k, v in kwargs.items()},
        }
        return self._host.ask(request, self._name, "returned")

    def __repr__(self) -> str:
        return f"<the student's {self._name}>"


class _Host:
    """The check process's state for one submission: the chapter's imports and a namespace
    that lives from check to check, as the notebook's does."""

    def __init__(self, imports: dict, incoming, outgoing):
        self.imports, self.incoming, self.outgoing = imports, incoming, outgoing
        self.namespace = {"__name__": "__check__", "__builtins__": builtins}
        self.assigned: set[str] = set()  # names bound by the checks run so far

    def send(self, message: dict) -> None:
        self.outgoing.write(json.dumps(message) + "\n")
        self.outgoing.flush()

    def ask(self, request: dict, name: str, verb: str):
        """The kernel's answer to `request`, as plain data, about `name`."""
        self.send({"ask": request})
        answer = json.loads(self.incoming.readline())
        if "timeout" in answer:
            raise TimeoutError(f"{name} timed out (the time limit per cell)")
        if "reply" not in answer:
            raise RuntimeError(f"{name}: {wire.clean(answer.get('failed', 'no reply'), 120)}")
        try:
            return wire.reply(
                answer["reply"],
                name,
                verb,
                lambda ref: Remote(self, ref, name if verb == "is" else f"{name}(...)"),
            )
        except wire.StudentError as err:
            if verb == "is" and err.kind == "NameError":
                raise NameError(f"name {name!r} is not defined in the notebook") from None
            raise

    def check(self, code: str) -> dict:
        """Run one check's code; -> its outcome (passed, and why not)."""
        try:
            free, bound = free_names(code)
            for name, keys in free.items():
                if name in self.imports:
                    for statement in self.imports[name]:
                        exec(statement, self.namespace)  # the chapter's own import
                elif name not in self.assigned:
                    request = {
                        "get": name,
                        "keys": None if keys is None else [wire.encode(k) for k in keys],
                    }
                    self.namespace[name] = self.ask(request, name, "is")
            self.assigned |= bound
            exec(compile(code, "<check>", "exec"), self.namespace)
        except BaseException as err:  # noqa: BLE001 (every failure is the check's outcome)
            lines = [
                f.lineno
                for f in traceback.extract_tb(err.__traceback__)
                if f.filename == "<check>"
            ]
            return {
                "passed": False,
                "ename": type(err).__name__,
                "evalue": wire.clean(err, 300),
                "line": lines[-1] if lines else None,
            }
        return {"passed": True}


def main() -> None:
    """The check process: JSON lines in (`{"imports": ...}`, then `{"check": code}` and the
    kernel's answers), JSON lines out (`{"ask": request}`, `{"done": outcome}`).

    Its own stdout is the protocol: anything a check prints goes to stderr instead."""
    outgoing = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    incoming = sys.stdin
    host = _Host(json.loads(incoming.readline())["imports"], incoming, outgoing)
    for line in incoming:
        host.send({"done": host.check(json.loads(line)["check"])})


# --- the grader's side ------------------------------------------------------------------------


class _CheckProcess:
    """The grader's handle on its check process: started on the first check, replaced by a
    fresh one after a check that overran (its state would be half-run)."""

    def __init__(self, imports: dict, folder: str):
        self.imports, self.folder = imports, folder
        self.process, self.stderr, self.drain = None, "", None

    async def _start(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "collapse.book.checkhost",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=_PROTOCOL_LIMIT,
            cwd=self.folder,
            env={**os.environ, "PYTHONPATH": path},
        )
        self.drain = asyncio.ensure_future(self._keep_stderr(self.process.stderr))
        await self._send({"imports": self.imports})

    async def _keep_stderr(self, stream) -> None:
        while chunk := await stream.read(65536):
            self.stderr = (self.stderr + chunk.decode(errors="replace"))[-_STDERR_TAIL:]

    async def _send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        await self.process.stdin.drain()

    async def run(self, code: str, ask, seconds: float) -> dict:
        """The outcome of one check, `ask(request, seconds_left)` answering its requests."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        if self.process is None:
            await self._start()
        await self._send({"check": code})
        while True:
            try:
                line = await asyncio.wait_for(
                    self.process.stdout.readline(), deadline - loop.time()
                )
            except TimeoutError:
                await self.close()
                return {
                    "passed": False,
                    "ename": "TimeoutError",
                    "evalue": f"the check ran past {seconds:.0f} s (the time limit per cell)",
                }
            if not line:
                last = (self.stderr.strip().splitlines() or ["no message"])[-1]
                await self.close()
                return {
                    "passed": False,
                    "ename": "GraderError",
                    "evalue": f"the check process ended: {wire.clean(last, 120)}",
                }
            message = json.loads(line)
            if "done" in message:
                return message["done"]
            await self._send(await ask(message["ask"], max(0.0, deadline - loop.time())))

    async def close(self) -> None:
        if self.process is not None:
            if self.process.returncode is None:
                self.process.kill()
            await self.process.wait()
            await self.drain
        self.process = None


@functools.cache
def _client_class():
    """`GradingClient`, made on first use: nbclient is imported only by the grader."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from nbclient.util import ensure_async, run_sync

    class GradingClient(NotebookClient):
        """An nbclient that runs the notebook's code cells in the kernel but its `checks`
        ({cell index: hidden}) in the check process; `outcomes` holds each check's outcome,
        `started` the index of the last cell started, `stuck` that of the last kernel cell
        interrupted at its time limit (None once a later one ran): where the kernel may still
        be, when a later request finds it unresponsive."""

        def __init__(self, nb, checks: dict, imports: dict, folder: str, **kw):
            super().__init__(nb, log=_QUIET, **kw)
            self.checks, self.outcomes = dict(checks), {}
            self.started = self.stuck = self.signalled = self._task = None
            self.process = _CheckProcess(imports, folder)

        async def async_execute(self, reset_kc: bool = False, **kwargs):
            self._task = asyncio.current_task()
            try:
                return await super().async_execute(reset_kc, **kwargs)
            except BaseException:  # a stop surfaces as whatever nbclient makes of it
                if (by := self._stopped_by()) is None:
                    raise
                raise GradingStoppedError(f"stopped by {by}") from None
            finally:
                await self.process.close()

        execute = run_sync(async_execute)

        @contextlib.asynccontextmanager
        async def async_setup_kernel(self, **kwargs):
            """nbclient's, with SIGINT and SIGTERM stopping the grading. nbclient's own handlers
            shut the kernel down and let the notebook run on, into a grade for work never graded
            ("stopped at the time limit per cell"), and stay installed after it."""
            loop = asyncio.get_running_loop()
            before = {signum: signal.getsignal(signum) for signum in _STOPS}
            async with super().async_setup_kernel(**kwargs):
                if (by := self._stopped_by()) is not None:  # while the kernel started
                    raise GradingStoppedError(f"stopped by {by}")
                for signum in _STOPS:  # RuntimeError: not the main thread (nbclient's: neither)
                    with contextlib.suppress(RuntimeError, NotImplementedError):
                        loop.add_signal_handler(signum, self._stop, signum)
                try:
                    yield
                finally:
                    for signum, handler in before.items():  # the grader's own handlers again
                        with contextlib.suppress(RuntimeError, NotImplementedError, ValueError):
                            loop.remove_signal_handler(signum)
                            signal.signal(signum, handler)

        def _stop(self, signum: int) -> None:
            self.signalled = signum
            if self._task is not None:
                self._task.cancel()

        def _stopped_by(self) -> str | None:
            """The signal that stopped the grading, if one did: caught by our handlers, or by
            nbclient's while the kernel started (its handler sets this future)."""
            if self.signalled is not None:
                return signal.Signals(self.signalled).name
            if getattr(self, "_async_cleanup_kernel_future", None) is not None:
                return "a signal"
            return None

        async def async_execute_cell(
            self, cell, cell_index, execution_count=None, store_history=True
        ):
            self.started = cell_index
            if cell_index not in self.checks:
                self.stuck = None
                return await super().async_execute_cell(
                    cell, cell_index, execution_count, store_history
                )
            outcome = await self.process.run(cell.source, self._ask, self.timeout)
            self.outcomes[cell_index] = outcome
            cell.outputs = [_shown(outcome, self.checks[cell_index])]
            return cell

        async def _async_handle_timeout(self, timeout, cell=None):
            self.stuck = self.started
            return await super()._async_handle_timeout(timeout, cell)

        async def _ask(self, request: dict, seconds: float) -> dict:
            """Send one request to the kernel and read its reply between a fresh nonce."""
            nonce = secrets.token_hex(16)
            code = (
                f"__import__('collapse.book.wire', fromlist=['serve']).serve("
                f"{nonce!r}, {json.dumps(request)!r})"
            )
            msg_id = await ensure_async(
                self.kc.execute(code, store_history=False, allow_stdin=False, stop_on_error=False)
            )
            text = await self._output(msg_id, seconds)
            if text is None:
                return {"timeout": True}
            if len(text) > _OUTPUT_LIMIT:
                return {"failed": "a reply too large"}
            end = text.rfind(nonce)
            start = text.rfind(nonce, 0, end)
            if start < 0:
                return {"failed": "no reply from the kernel"}
            return {"reply": text[start + len(nonce) : end]}

        async def _output(self, msg_id: str, seconds: float) -> str | None:
            """The stdout of request `msg_id` until the kernel is idle; None after `seconds`
            (the kernel interrupted). Past `_OUTPUT_LIMIT` only its length is kept."""
            loop = asyncio.get_running_loop()
            deadline, chunks, size = loop.time() + seconds, [], 0
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    await ensure_async(self.km.interrupt_kernel())
                    if await self._idle(msg_id, _INTERRUPT_WAIT):
                        return None
                    raise CellTimeoutError("a check's request did not respond to the interrupt")
                try:
                    msg = await self.kc.get_iopub_msg(timeout=min(left, 1.0))
                except queue.Empty:
                    if not await self.kc.is_alive():
                        raise DeadKernelError("Kernel died") from None
                    continue
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                content = msg["content"]
                if msg["msg_type"] == "stream" and content.get("name") == "stdout":
                    text = str(content.get("text", ""))
                    size += len(text)
                    chunks = [text] if size > _OUTPUT_LIMIT else [*chunks, text]
                if msg["msg_type"] == "status" and content.get("execution_state") == "idle":
                    return "".join(chunks) if size <= _OUTPUT_LIMIT else " " * (_OUTPUT_LIMIT + 1)

        async def _idle(self, msg_id: str, seconds: float) -> bool:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + seconds
            while (left := deadline - loop.time()) > 0:
                try:
                    msg = await self.kc.get_iopub_msg(timeout=left)
                except queue.Empty:
                    return False
                if (
                    msg["parent_header"].get("msg_id") == msg_id
                    and msg["msg_type"] == "status"
                    and msg["content"].get("execution_state") == "idle"
                ):
                    return True
            return False

    return GradingClient


def _shown(outcome: dict, hidden: bool) -> dict:
    """The check cell's output in the executed notebook: pass or fail, and for a visible check
    why (a hidden one says no more, wherever the notebook ends up)."""
    import nbformat

    if outcome["passed"]:
        return nbformat.v4.new_output("stream", name="stdout", text="check passed\n")
    if hidden:
        return nbformat.v4.new_output(
            "error", ename="CheckFailed", evalue="hidden check failed", traceback=[]
        )
    return nbformat.v4.new_output(
        "error", ename=outcome["ename"], evalue=outcome["evalue"], traceback=[]
    )


def grading_client(nb, checks: dict, imports: dict, folder: str, **settings):
    """The nbclient that grades `nb`: its code cells run in the kernel, its `checks`
    ({cell index: hidden}) in a check process started in `folder`.

    Parameters
    ----------
    nb : nbformat.NotebookNode
        The notebook to execute, its checks the chapter's own cells.
    checks : dict
        {cell index: whether the check is hidden}.
    imports : dict
        `chapter_imports` of the chapter source.
    folder : str
        The check process's working folder (the grader's, not the kernel's).
    **settings
        nbclient's settings (timeout, kernel_manager_class, ...).

    Returns
    -------
    An nbclient `NotebookClient` whose `outcomes` are {cell index: outcome} once executed.
    """
    return _client_class()(nb, checks, imports, folder, **settings)


if __name__ == "__main__":
    main()
