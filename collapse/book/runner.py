"""Execute the MyST notebooks with papermill: profiles, parameter checks, content-hash cache.

notebooks/NN-name.md --(jupytext + papermill, profile parameters)--> book/executed/
NN-name.ipynb and NN-name.verdicts.json. A run with another family of seeds (`seed_family`
K > 0, see collapse.rng) goes to book/executed/families/<profile>/family-K/ instead, so that
it never replaces the book's own results. Every parameter is checked against the
notebook's `parameters` cell (name, type) and the ranges in its header before anything
runs, and a notebook is re-executed only when its provenance digest changes (its source
and parameters, the science modules it imports, the numeric packages' versions: see
collapse.provenance); editing this tooling re-executes nothing.
"""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .. import provenance, rng
from ..atomic import atomic_path, write_atomic
from ..checks import ParameterError, check_int
from . import scoreboard

__all__ = [
    "Notebook",
    "Project",
    "RunResult",
    "NotebookError",
    "PROFILES",
    "parse_assignments",
    "parse_sets",
    "plan",
    "execute",
    "execute_all",
    "read_myst",
    "kernel_manager",
    "ANSI",
]

PROFILES = ("fast", "book", "paper")
PACKAGE = Path(__file__).resolve().parents[1]
_RANGE_KEYS = {"min", "max", "exclusive_min", "choices", "min_items"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # terminal colours in tracebacks


class NotebookError(RuntimeError):
    """A notebook raised: names the notebook, the cell and the error."""


@dataclass
class Notebook:
    """A notebook's source and what the runner needs from it."""

    name: str
    path: Path
    claim: str
    paper_ref: str
    defaults: dict
    ranges: dict
    imports: tuple[str, ...]  # the science modules its code imports

    @classmethod
    def load(cls, path: Path) -> Notebook:
        header, code = read_myst(path.read_text())
        meta = header.get("collapse", {})
        cells = [source for source, tags in code if "parameters" in tags]
        if len(cells) != 1:
            raise ParameterError(
                f"{path.name}: needs exactly one cell tagged 'parameters', found {len(cells)}"
            )
        ranges = meta.get("ranges", {}) or {}
        defaults = parse_assignments(cells[0], path.name)
        for name, spec in ranges.items():
            if name not in defaults or not isinstance(spec, dict) or set(spec) - _RANGE_KEYS:
                raise ParameterError(
                    f"{path.name}: range for {name!r} must name a parameter "
                    f"and use only {sorted(_RANGE_KEYS)}"
                )
        imports = _imports(source for source, _ in code)
        return cls(
            path.stem,
            path,
            meta.get("claim", ""),
            meta.get("paper_ref", ""),
            defaults,
            ranges,
            imports,
        )

    def source(self):
        import jupytext

        return jupytext.read(self.path)


_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)
_CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```$", re.S | re.M)
_OPTIONS = re.compile(r"\A---\n(.*?)\n---\n|\A((?::[^\n]*\n)+)", re.S)


def read_myst(text: str) -> tuple[dict, list[tuple[str, list[str]]]]:
    """A MyST notebook's header and its code cells as (source, tags), without jupytext.

    Why: importing jupytext (nbformat, jsonschema) takes seconds, and `collapse list` needs
    only this; tests/test_runner.py holds it to jupytext's reading of every chapter.
    """
    match = _FRONT_MATTER.match(text)
    header = (yaml.safe_load(match.group(1)) or {}) if match else {}
    cells = []
    for body in _CODE_CELL.findall(text):
        options = _OPTIONS.match(body)
        meta = {}
        if options and options.group(1) is not None:
            meta = yaml.safe_load(options.group(1)) or {}
        elif options:
            meta = yaml.safe_load(options.group(2).replace("\n:", "\n").lstrip(":")) or {}
        source = body[options.end() :] if options else body
        cells.append((source.strip("\n"), list(meta.get("tags", []))))
    return header, cells


def _imports(sources) -> tuple[str, ...]:
    """Science modules imported by a notebook's code cells (all of them if a cell
    does not parse).
    """
    found = set()
    for source in sources:
        try:
            found |= provenance.imported_modules(source)
        except SyntaxError:
            return provenance.science_modules()
    return tuple(sorted(found))


def parse_assignments(source: str, where: str = "parameters cell") -> dict:
    """`name = literal` lines of a parameters cell, as a dict (anything else is an error)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        raise ParameterError(
            f"{where}: the parameters cell is not valid Python ({err.msg})"
        ) from None
    values = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            raise ParameterError(
                f"{where}: the parameters cell may hold only `name = literal` lines "
                f"(line {node.lineno})"
            )
        try:
            values[node.targets[0].id] = ast.literal_eval(node.value)
        except ValueError:
            raise ParameterError(
                f"{where}: parameter {node.targets[0].id!r} must be a literal value"
            ) from None
    return values


def _type_name(value) -> str:
    return {bool: "a bool", int: "an int", float: "a number", str: "a string", list: "a list"}.get(
        type(value), type(value).__name__
    )


def _check_type(name: str, value, default):
    """value coerced to the default's type (an int is a valid float), or a one-line error."""
    if isinstance(default, (bool, str)):
        ok = type(value) is type(default)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, list):
        if not isinstance(value, list):
            raise ParameterError(f"parameter {name} must be {_type_name(default)}, got {value!r}")
        if default:
            return [_check_type(f"{name}[{i}]", v, default[0]) for i, v in enumerate(value)]
        return value
    else:
        ok = True
    if not ok:
        raise ParameterError(f"parameter {name} must be {_type_name(default)}, got {value!r}")
    return value


def _choices(spec: dict):
    """The allowed values of a range: its list, or every registered mask for `choices: masks`
    (a mask added to collapse.masks.REGISTRY is then a choice too)."""
    choices = spec.get("choices")
    if choices == "masks":
        from .. import masks

        return masks.names()
    return choices


def _check_finite(name: str, item, spec: dict) -> None:
    """NaN, for any parameter, and an infinity, for one with a range, as a one-line error.

    Why: every comparison with NaN is false, so `--set min_fall=.nan` (YAML's NaN) would pass
    any range; and an infinite size or threshold only makes a run that never ends."""
    bounded = spec.get("min") is not None or spec.get("max") is not None
    if isinstance(item, float) and (math.isnan(item) or (bounded and math.isinf(item))):
        low, high = spec.get("min"), spec.get("max")
        parts = [f"{'>' if spec.get('exclusive_min') else '>='} {low}"] if low is not None else []
        parts += [f"<= {high}"] if high is not None else []
        within = f" {' and '.join(parts)}" if parts else ""
        raise ParameterError(f"parameter {name} must be a finite number{within}, got {item!r}")


def _check_range(name: str, value, spec: dict):
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and len(value) < spec.get("min_items", 0):
        raise ParameterError(
            f"parameter {name} must have at least {spec['min_items']} items, got {len(value)}"
        )
    choices = _choices(spec)
    for item in items:
        if choices is not None and item not in choices:
            raise ParameterError(
                f"parameter {name} must be one of {', '.join(map(str, choices))}; got {item!r}"
            )
        _check_finite(name, item, spec)
        low, strict = spec.get("min"), spec.get("exclusive_min", False)
        if low is not None and (item < low or (strict and item == low)):
            raise ParameterError(
                f"parameter {name} must be {'>' if strict else '>='} {low}, got {item!r}"
            )
        if spec.get("max") is not None and item > spec["max"]:
            raise ParameterError(f"parameter {name} must be <= {spec['max']}, got {item!r}")


def parse_sets(items) -> dict:
    """`--set key=value` strings -> {key: value}, values read as YAML (3, 0.5, true, [a, b])."""
    overrides = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"--set takes key=value, got {item!r}")
        try:
            overrides[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            raise ParameterError(f"--set {key.strip()}: cannot read value {text!r}") from None
    return overrides


@dataclass
class RunResult:
    """What happened to one notebook: executed or reused, where, how long, its verdicts."""

    name: str
    status: str
    seconds: float
    output: Path
    records: list = field(default_factory=list)


@dataclass
class Project:
    """A checkout: notebooks/ (sources, profiles.yml, expectations.yml) and book/executed/."""

    root: Path

    @classmethod
    def find(cls) -> Project:
        """The nearest folder at or above the current one with notebooks/profiles.yml (else
        the installed checkout's); `at` takes a root as given."""
        here = Path.cwd().resolve()
        for folder in (here, *here.parents, PACKAGE.parent):
            if (folder / "notebooks" / "profiles.yml").is_file():
                return cls(folder)
        raise ParameterError(
            "no project found: run from a checkout (a folder with notebooks/profiles.yml), "
            f"not {here}"
        )

    @classmethod
    def at(cls, root: Path) -> Project:
        """The project whose root is `root` exactly (`--root`): never one found elsewhere."""
        folder = Path(root).resolve()
        if not (folder / "notebooks" / "profiles.yml").is_file():
            raise ParameterError(
                f"--root {root}: not a checkout (no notebooks/profiles.yml there)"
            )
        return cls(folder)

    @property
    def notebooks_dir(self) -> Path:
        return self.root / "notebooks"

    @property
    def executed_dir(self) -> Path:
        return self.root / "book" / "executed"

    def output_dir(self, profile: str, seed_family: int = 0) -> Path:
        """Where a run's executed notebooks go: book/executed/ for the book's own seeds, a
        folder per profile and family for another family of seeds."""
        if seed_family == 0:
            return self.executed_dir
        return self.executed_dir / "families" / profile / f"family-{seed_family}"

    def notebooks(self) -> dict[str, Notebook]:
        return {
            p.stem: Notebook.load(p) for p in sorted(self.notebooks_dir.glob("[0-9][0-9]-*.md"))
        }

    def select(self, names) -> list[Notebook]:
        """Notebooks by full name, number ('01') or name without number; all when
        names is empty. A full name whose number has moved (chapters split and renumbered:
        a class's assignment made before) finds its chapter by the name without number.
        """
        available = self.notebooks()
        if not names:
            return list(available.values())
        chosen = []
        for name in names:
            matches = [nb for stem, nb in available.items() if name in (stem, stem[:2], stem[3:])]
            if not matches and re.fullmatch(r"\d\d-.+", name):
                matches = [nb for stem, nb in available.items() if stem[3:] == name[3:]]
            if len(matches) != 1:
                raise ParameterError(
                    f"notebook must be one of {', '.join(available) or '(none found)'}; "
                    f"got {name!r}"
                )
            chosen.append(matches[0])
        return chosen

    def _yaml(self, filename: str) -> dict:
        path = self.notebooks_dir / filename
        if not path.is_file():
            return {}
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            line = raw.count(b"\n", 0, err.start) + 1
            raise ParameterError(
                f"notebooks/{filename} is not UTF-8 text (byte {raw[err.start]:#04x} on line "
                f"{line})"
            ) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark else ""
            raise ParameterError(f"notebooks/{filename} is not valid YAML{where}") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise ParameterError(
                f"notebooks/{filename} must be a mapping, got {type(data).__name__}"
            )
        return data

    def profiles(self) -> dict:
        """notebooks/profiles.yml: {profile: {notebook: {parameter: value}}}, checked for shape."""
        data = self._yaml("profiles.yml")
        for profile, per_notebook in data.items():
            if profile not in PROFILES:
                raise ParameterError(
                    f"notebooks/profiles.yml: profile must be one of {', '.join(PROFILES)}; "
                    f"got {profile!r}"
                )
            if per_notebook is None:
                continue
            if not isinstance(per_notebook, dict) or not all(
                isinstance(v, dict) or v is None for v in per_notebook.values()
            ):
                raise ParameterError(
                    f"notebooks/profiles.yml: profile {profile!r} must map notebook names "
                    "to {parameter: value}"
                )
        return data

    def expectations(self) -> dict:
        """notebooks/expectations.yml: {notebook: {verdict key: {profile: outcome, "why",
        "short", "whose": text}}}, checked for shape (an empty entry reads as none)."""
        data = self._yaml("expectations.yml")
        for notebook, entries in data.items():
            entries = data[notebook] = {} if entries is None else entries
            if not isinstance(entries, dict):
                raise ParameterError(
                    f"notebooks/expectations.yml: {notebook} must map verdict keys to "
                    f"{{profile: outcome}}, got {entries!r}"
                )
            for key, entry in entries.items():
                entry = entries[key] = {} if entry is None else entry
                if not isinstance(entry, dict) or not all(
                    isinstance(v, str) for v in entry.values()
                ):
                    raise ParameterError(
                        f"notebooks/expectations.yml: {notebook} {key} must map profiles to "
                        f"outcomes and why, short, whose to text, got {entry!r}"
                    )
        return data

    def resolve(self, notebook: Notebook, profile: str, overrides: dict) -> dict:
        """Defaults, then the profile's values, then --set; every value checked."""
        if profile not in PROFILES:
            raise ParameterError(f"profile must be one of {', '.join(PROFILES)}; got {profile!r}")
        from_profile = (self.profiles().get(profile) or {}).get(notebook.name) or {}
        params = dict(notebook.defaults)
        for name, value in from_profile.items():
            if name not in notebook.defaults:
                allowed = ", ".join(notebook.defaults)
                raise ParameterError(
                    f"notebooks/profiles.yml [{profile}]: {name!r} is not a parameter "
                    f"of {notebook.name} (allowed: {allowed})"
                )
            params[name] = value
        params.update(
            {name: value for name, value in overrides.items() if name in notebook.defaults}
        )
        for name, value in params.items():
            value = _check_type(name, value, notebook.defaults[name])
            _check_range(name, value, notebook.ranges.get(name, {}))
            params[name] = value
        return params


def content_hash(notebook: Notebook, params: dict, profile: str, seed_family: int = 0) -> str:
    """The provenance digest of an executed notebook: its source, parameters, profile and
    seed family, the science modules it imports (and theirs), and the numeric packages'
    versions."""
    settings = {"params": params, "profile": profile, "seed_family": seed_family}
    settings = json.dumps(settings, sort_keys=True).encode()
    payload = notebook.path.read_bytes() + b"\n" + settings
    return provenance.digest("notebook", payload, notebook.imports)


def _cached(output: Path, digest: str) -> bool:
    if not output.is_file() or not output.with_suffix(".verdicts.json").is_file():
        return False
    try:
        meta = json.loads(output.read_text()).get("metadata", {}).get("collapse", {})
    except (OSError, json.JSONDecodeError):
        return False
    return meta.get("hash") == digest


def _failure(name: str, err) -> NotebookError:
    """The failing cell (its first source line and execution count) and the error,
    without colour codes.
    """
    source = (getattr(err, "source", "") or "").strip().splitlines()
    first_line = source[0] if source else "?"
    trace = ANSI.sub("", "\n".join(getattr(err, "traceback", [])[-4:]))
    return NotebookError(
        (
            f"notebook {name} failed in cell In[{err.exec_count}] `{first_line}`: "
            f"{err.ename}: {err.evalue}\n{trace}"
        ).rstrip()
    )


def kernel_manager(prefix=(), **settings):
    """A kernel manager class whose kernels start under `prefix` (a command, such as the
    grader's sandbox) with `settings` as defaults, their start-up chatter (e.g. the TCP
    warning) kept off the terminal.

    Why one: the runner and the grader start kernels the same way but for the sandbox. Cell
    output, stderr included, still reaches the notebook through the kernel's messages.
    """
    import subprocess

    from jupyter_client.manager import AsyncKernelManager

    class KernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            super().__init__(**{**settings, **kw})

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            kw["stderr"] = subprocess.DEVNULL
            return await super()._async_launch_kernel([*prefix, *kernel_cmd], **kw)

    return KernelManager


def _papermill(
    source, output: Path, params: dict, cwd: Path, name: str, timeout: int | None, stream: bool
):
    """Execute a notebook node with papermill into `output` (a scratch path); errors as
    NotebookError.

    stream: copy the kernel's stderr (a chunked sweep's ETA and progress bars) to ours as it
    comes.
    """
    import sys

    import papermill

    os.environ.setdefault(
        "JUPYTER_PREFER_ENV_PATH", "1"
    )  # this environment's kernel, not a user-wide one
    try:
        executed = papermill.execute_notebook(
            source,
            str(output),
            parameters=params,
            kernel_name="python3",
            progress_bar=False,
            cwd=str(cwd),
            execution_timeout=timeout,
            kernel_manager_class=kernel_manager(),
            stderr_file=sys.stderr if stream else None,
        )
        # papermill records a notebook passed as an object whole, solutions and hidden checks
        # with it: keep its name only
        executed.metadata.setdefault("papermill", {})["input_path"] = f"{name}.md"
        return executed
    except papermill.PapermillExecutionError as err:
        raise _failure(name, err) from None
    except Exception as err:  # the kernel died, a cell timed out, the kernel would not start
        raise NotebookError(f"notebook {name} failed: {type(err).__name__}: {err}") from None


def _environment(
    project: Project, profile: str, seed_family: int, progress: Path | None = None
) -> dict:
    """Variables the kernel gets: the seed family (collapse.rng), for the paper profile a
    folder where chunked sweeps keep their chunks (collapse.chunks) and, if given, the file
    where its loops write their progress (collapse.book.progress).
    """
    from .progress import ENV

    env = {rng.FAMILY_ENV: str(seed_family)}
    if profile == "paper":
        env["COLLAPSE_CHUNKS"] = str(project.executed_dir / ".chunks")
    if progress is not None:
        env[ENV] = str(progress)
    return env


_POLL = 1.0  # seconds between two reads of the progress files


@contextlib.contextmanager
def _progress_folder(project: Project, echo):
    """A folder for the running notebooks' progress files, `NN-name.log`, read every _POLL
    seconds in a thread that hands each new line to `echo` as 'NN-name | line'; None when
    `echo` is None.

    Why in book/executed/: a notebook's Dask worker shares the checkout (book/scale.md), so
    it reaches this folder too. The folder goes when the runs end.
    """
    if echo is None:
        yield None
        return
    project.executed_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".progress-", dir=project.executed_dir) as folder:
        stop = threading.Event()
        reader = threading.Thread(target=_tail, args=(Path(folder), echo, stop), daemon=True)
        reader.start()
        try:
            yield Path(folder)
        finally:
            stop.set()
            reader.join()


def _tail(folder: Path, echo, stop: threading.Event) -> None:
    """Hand each new whole line of the folder's files to `echo` until `stop` is set, and read
    once more then: the last lines of a notebook that just finished are not lost."""
    done: dict[Path, int] = {}
    while True:
        stopping = stop.wait(_POLL)
        for path in sorted(folder.glob("*.log")):
            with path.open("rb") as stream:
                stream.seek(done.get(path, 0))
                text = stream.read()
            whole = text[: text.rfind(b"\n") + 1]  # a line being written waits for its end
            done[path] = done.get(path, 0) + len(whole)
            for line in whole.decode("utf-8", "replace").splitlines():
                echo(f"{path.stem} | {line}")
        if stopping:
            return


@contextlib.contextmanager
def _patched_environ(extra: dict):
    """os.environ with `extra` set while inside (a kernel started inside inherits them)."""
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def verdict_id(notebook: str, key: str) -> str:
    """A verdict's name across the book: the chapter's slug and the verdict's key,
    'mask-radius/every-mask-collapses'."""
    return f"{notebook[3:]}/{key}"


def _finish(
    project: Project,
    notebook: Notebook,
    executed,
    digest: str,
    params: dict,
    profile: str,
    seconds: float,
    seed_family: int,
    folder: Path,
) -> RunResult:
    """Records and cache metadata; the notebook and its verdicts written atomically into
    `folder`."""
    import nbformat

    folder.mkdir(parents=True, exist_ok=True)
    output = folder / f"{notebook.name}.ipynb"
    records = [
        {
            **r,
            "id": verdict_id(notebook.name, r["key"]),
            "notebook": notebook.name,
            "profile": profile,
            "seed_family": seed_family,
        }
        for r in scoreboard.records_from_notebook(executed)
    ]
    executed.metadata["collapse"] = {
        "hash": digest,
        "profile": profile,
        "seed_family": seed_family,
        "parameters": params,
        "seconds": round(seconds, 2),
        "device": device_of(params),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _write_json(output.with_suffix(".verdicts.json"), records)
    with atomic_path(output) as partial:
        nbformat.write(executed, str(partial))
    return RunResult(notebook.name, "executed", seconds, output, records)


def _write_json(path: Path, payload) -> None:
    """Write JSON atomically (a reader never sees half a file) and canonically (sorted keys:
    the same bytes whichever executor ran it)."""
    write_atomic(path, json.dumps(payload, indent=1, sort_keys=True))


def device_of(params: dict) -> str:
    """The device a run with these parameters uses here ("auto": cuda when torch sees one)."""
    name = params.get("device", "cpu")
    if name == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def is_current(
    project: Project, notebook: Notebook, params: dict, profile: str, seed_family: int = 0
) -> bool:
    """Whether this notebook's result for these parameters, sources and seeds is on disk."""
    output = project.output_dir(profile, seed_family) / f"{notebook.name}.ipynb"
    return _cached(output, content_hash(notebook, params, profile, seed_family))


def _cached_result(project: Project, notebook: Notebook, digest: str, folder: Path):
    output = folder / f"{notebook.name}.ipynb"
    if not _cached(output, digest):
        return None
    return RunResult(
        notebook.name,
        "cached",
        0.0,
        output,
        json.loads(output.with_suffix(".verdicts.json").read_text()),
    )


def execute(
    project: Project,
    notebook: Notebook,
    params: dict,
    profile: str,
    *,
    force: bool = False,
    timeout: int | None = None,
    stream: bool = False,
    seed_family: int = 0,
    folder: Path | None = None,
    progress: Path | None = None,
) -> RunResult:
    """Execute one notebook (or reuse its cached result) with the seeds of `seed_family`,
    into `folder` (default: `Project.output_dir`); outputs are written atomically.

    progress: a file where the kernel's long loops write their progress lines
    (collapse.book.progress), none if None."""
    seed_family = check_int("seed family", seed_family, minimum=0)
    digest = content_hash(notebook, params, profile, seed_family)
    folder = folder or project.output_dir(profile, seed_family)
    cached = None if force else _cached_result(project, notebook, digest, folder)
    if cached:
        return cached
    folder.mkdir(parents=True, exist_ok=True)
    # a name of this run's own: a second run of the chapter at once must not write into it,
    # nor remove it when it ends
    handle, scratch = tempfile.mkstemp(
        dir=folder, prefix=f".{notebook.name}.", suffix=".partial.ipynb"
    )
    os.close(handle)
    partial = Path(scratch)
    start = time.perf_counter()
    try:
        with _patched_environ(_environment(project, profile, seed_family, progress)):
            executed = _papermill(
                notebook.source(),
                partial,
                params,
                project.notebooks_dir,
                notebook.name,
                timeout,
                stream,
            )
    finally:
        seconds = time.perf_counter() - start
        partial.unlink(missing_ok=True)
    return _finish(
        project, notebook, executed, digest, params, profile, seconds, seed_family, folder
    )


def _remote_job(
    text: str, name: str, params: dict, cwd: str, timeout: int | None, env: dict
) -> tuple[str, float]:
    """Run on an executor's worker: execute a notebook's MyST text, return the executed notebook as
    JSON and the seconds taken.
    """
    import tempfile

    import jupytext
    import nbformat

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch, _patched_environ(env):
        executed = _papermill(
            jupytext.reads(text, fmt="md:myst"),
            Path(scratch) / f"{name}.ipynb",
            params,
            Path(cwd),
            name,
            timeout,
            False,
        )
    return nbformat.writes(executed), time.perf_counter() - start


def execute_all(
    project: Project,
    planned,
    profile: str,
    *,
    force: bool = False,
    timeout: int | None = None,
    executor=None,
    stream: bool = False,
    seed_family: int = 0,
    echo=None,
):
    """Execute planned (notebook, params) pairs, the stale ones on `executor`
    (collapse.executors; default: here, in order), with the seeds of `seed_family`.

    Yields RunResults as notebooks finish: cached ones first. A remote worker needs this
    checkout at the same path (notebooks read files next to them) and the same
    environment; the results come back here and are written by this process. echo, if
    given, is called from a thread with each progress line of the running notebooks' long
    loops, 'NN-name | sweep: 40%|...' (collapse.book.progress); none enters a notebook.
    """
    import nbformat

    with _progress_folder(project, echo) as lines:

        def log(notebook):
            return None if lines is None else lines / f"{notebook.name}.log"

        if executor is None or not executor.remote:
            for notebook, params in planned:
                yield execute(
                    project,
                    notebook,
                    params,
                    profile,
                    force=force,
                    timeout=timeout,
                    stream=stream,
                    seed_family=seed_family,
                    progress=log(notebook),
                )
            return
        seed_family = check_int("seed family", seed_family, minimum=0)
        folder = project.output_dir(profile, seed_family)
        stale = []
        for notebook, params in planned:
            digest = content_hash(notebook, params, profile, seed_family)
            cached = None if force else _cached_result(project, notebook, digest, folder)
            if cached:
                yield cached
            else:
                stale.append((notebook, params, digest))
        folder.mkdir(parents=True, exist_ok=True)
        jobs = [
            (
                nb.path.read_text(),
                nb.name,
                params,
                str(project.notebooks_dir),
                timeout,
                _environment(project, profile, seed_family, log(nb)),
            )
            for nb, params, _ in stale
        ]
        for index, (text, seconds) in executor.map(_remote_job, jobs):
            notebook, params, digest = stale[index]
            executed = nbformat.reads(text, as_version=4)
            yield _finish(
                project, notebook, executed, digest, params, profile, seconds, seed_family, folder
            )


def plan(project: Project, names, profile: str, overrides: dict) -> list[tuple[Notebook, dict]]:
    """Select notebooks and resolve every parameter before anything
    runs (errors: ParameterError).
    """
    notebooks = project.select(names)
    unknown = [key for key in overrides if not any(key in nb.defaults for nb in notebooks)]
    if unknown:
        allowed = sorted({p for nb in notebooks for p in nb.defaults})
        names_run = ", ".join(nb.name for nb in notebooks)
        raise ParameterError(
            f"--set {unknown[0]}: not a parameter of {names_run} (allowed: {', '.join(allowed)})"
        )
    return [(nb, project.resolve(nb, profile, overrides)) for nb in notebooks]


def collect_records(project: Project, folder: Path | None = None) -> list[dict]:
    """Every verdict record of the executed notebooks (in book/executed/, or `folder`), in
    notebook order.

    Why: only the project's own chapters count; a notebook executed under a chapter's old
    name (chapters split and renumbered since) would count its verdicts twice, or under a
    number that is now another chapter's.
    """
    folder = folder or project.executed_dir
    records = []
    for source in sorted(project.notebooks_dir.glob("[0-9][0-9]-*.md")):
        path = folder / f"{source.stem}.verdicts.json"
        if path.is_file():
            records.extend(json.loads(path.read_text()))
    return records
