"""The `collapse` command: list, run, verdicts, reseed, book, publish, assignments, grade.

Exit status: 0 success; 1 a notebook raised, a verdict outcome differs from
notebooks/expectations.yml, the book build failed, or a graded submission failed a
check; 2 bad input (one line naming the parameter and what is allowed; nothing written).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from ..checks import ParameterError, check_int
from . import publish, runner

# Each command imports what it needs when it runs (torch, pandas, papermill and Jupyter Book
# take seconds to import): `collapse --help` and `collapse list` answer at once.


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="collapse", description="Execute, verify and publish the rank-collapse companion."
    )
    parser.add_argument(
        "--root",
        type=Path,
        help="the checkout to work in (default: found from the current folder)",
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command")  # a missing one is named by _parse
    commands.add_parser("list", help="notebooks, their claims and parameters")
    run = commands.add_parser("run", help="execute notebooks with papermill into book/executed/")
    run.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="notebook name, number or name without number (default: all)",
    )
    run.add_argument("--profile", default="book", help="fast, book or paper (default: book)")
    run.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a parameter (YAML value)",
    )
    run.add_argument(
        "--force", action="store_true", help="execute even when the cached result is current"
    )
    run.add_argument(
        "--timeout", type=int, default=None, help="seconds allowed per cell (default: no limit)"
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print each notebook's work, ETA and peak memory, and execute nothing",
    )
    run.add_argument(
        "--seed-family",
        type=int,
        default=0,
        metavar="K",
        help=(
            "draw every seed from family K, disjoint from the book's (0, the default); the "
            "results go to book/executed/families/PROFILE/family-K/"
        ),
    )
    _executor_options(run)
    _progress_option(run)
    verdicts = commands.add_parser("verdicts", help="every verdict of the executed notebooks")
    verdicts.add_argument(
        "--json", action="store_true", help="print a JSON list of verdict records"
    )
    again = commands.add_parser(
        "reseed",
        help="rerun chapters with other families of seeds and record, per verdict, how many "
        "families gave each outcome (notebooks/reseed.yml)",
    )
    again.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="notebook name, number or name without number (default: all)",
    )
    again.add_argument(
        "--families",
        type=int,
        default=3,
        metavar="K",
        help="families of seeds, the book's own (0) included (default: 3)",
    )
    again.add_argument(
        "--book",
        choices=("unsettled", "all", "none"),
        default="unsettled",
        help=(
            "after the fast profile, run the book profile for the chapters the fast families "
            "did not settle alike (default), for all, or for none"
        ),
    )
    again.add_argument(
        "--timeout", type=int, default=None, help="seconds allowed per cell (default: no limit)"
    )
    book = commands.add_parser("book", help="run what is stale, then a clean jupyter-book build")
    book.add_argument("--profile", default="book", help="fast, book or paper (default: book)")
    book.add_argument(
        "--student",
        action="store_true",
        help="the student edition: solutions hidden, into _build/student/html",
    )
    book.add_argument(
        "--repository",
        metavar="URL",
        help=(
            "the book's public GitHub repository (default: repository.url in _config.yml): "
            "turns on Colab and Binder buttons opening each page's executed notebook from the "
            "published branch"
        ),
    )
    book.add_argument(
        "--branch",
        default="gh-pages",
        help="with a repository: the branch the site is published to (default: gh-pages)",
    )
    book.add_argument(
        "--pdf",
        action="store_true",
        help="also print the whole book into one PDF with a table of contents (needs Chromium)",
    )
    _executor_options(book)
    _progress_option(book)
    assign = commands.add_parser(
        "assignments",
        help="assignment notebooks: solution cells replaced by stubs, check cells kept",
    )
    assign.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="notebook name, number or name without number (default: all)",
    )
    assign.add_argument(
        "--out", type=Path, help="folder for the .ipynb files (default: _build/assignments)"
    )
    publish.add_arguments(commands.add_parser("publish", help=publish.HELP))
    grade = commands.add_parser(
        "grade",
        help="grade submitted assignments, each in a sandbox, into a gradebook "
        "(exit 0 when every check of every submission passes)",
    )
    grade.add_argument(
        "paths", type=Path, nargs="+", metavar="PATH", help="a submission (.ipynb) or a folder"
    )
    grade.add_argument(
        "--csv", metavar="FILE", help="write the gradebook, one row per submission"
    )
    grade.add_argument(
        "--jobs", type=int, default=1, help="submissions graded at once (default: 1)"
    )
    grade.add_argument(
        "--timeout",
        type=int,
        default=60,
        help="seconds allowed per cell before it is interrupted (default: 60)",
    )
    grade.add_argument(
        "--memory",
        type=int,
        default=4096,
        help="MB of memory for all of a submission's processes together (default: 4096)",
    )
    grade.add_argument(
        "--processes",
        type=int,
        default=256,
        help="processes and threads of a submission together (default: 256)",
    )
    grade.add_argument(
        "--max-time",
        type=int,
        default=900,
        help="seconds a submission may run in all before it is stopped (default: 900)",
    )
    return parser


def _executor_options(parser: argparse.ArgumentParser) -> None:
    """--executor, --scheduler, --workers: where stale notebooks run (book/scale.md)."""
    parser.add_argument(
        "--executor",
        default="local",
        help="local (here, one at a time; default) or dask (a Dask cluster)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help=(
            "with --executor dask: a running scheduler, tcp://host:8786 (default: a LocalCluster)"
        ),
    )
    parser.add_argument(
        "--workers",
        type=int,
        help="with --executor dask and no --scheduler: LocalCluster worker processes (default: 2)",
    )


def _progress_option(parser: argparse.ArgumentParser) -> None:
    """--progress: the long loops of the running chapters shown (collapse.book.progress)."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        help=(
            "print the progress of each running chapter's long loops (sweeps, layers) on "
            "stderr, a line every few seconds prefixed with the chapter, also with several "
            "workers; the executed notebooks are the same either way (default: on when stderr "
            "is a terminal)"
        ),
    )


def _version() -> str:
    """What `collapse --version` prints: the installed distribution's version, under its
    former name `collapse` until the package is reinstalled, without importing the library."""
    from importlib import metadata

    for distribution in ("rank-collapse", "collapse"):
        try:
            return f"collapse (rank-collapse) {metadata.version(distribution)}"
        except metadata.PackageNotFoundError:
            pass
    return "collapse (rank-collapse) unknown"


# The least value of each count or limit a command takes (argparse's `type=int` takes -5),
# checked before anything runs, a dry run included.
_AT_LEAST = {
    "timeout": ("--timeout", 1),
    "workers": ("--workers", 1),
    "seed_family": ("--seed-family", 0),
    "families": ("--families", 2),
    "jobs": ("--jobs", 1),
    "memory": ("--memory", 256),
    "processes": ("--processes", 16),
    "max_time": ("--max-time", 1),
}


def _parse(argv) -> argparse.Namespace:
    """The command line; an option or argument nobody takes, no command, or a count below its
    least value as a ParameterError naming it (argparse alone would say that a command is
    required, and take any int)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, unknown = _parser().parse_known_args(argv)
    if unknown:
        kind = "option" if unknown[0].startswith("-") else "argument"
        after = args.command and argv.index(unknown[0]) > argv.index(args.command)
        where = f"collapse {args.command}" if after else "collapse"
        raise ParameterError(f"unrecognized {kind} {unknown[0]} (see {where} --help)")
    if args.command is None:
        raise ParameterError("a command is required (see collapse --help)")
    for attribute, (option, least) in _AT_LEAST.items():
        if getattr(args, attribute, None) is not None:
            check_int(option, getattr(args, attribute), minimum=least)
    return args


def _list(project: runner.Project) -> int:
    for nb in project.notebooks().values():
        print(f"{nb.name}  {nb.claim}  [{nb.paper_ref}]")
        for name, value in nb.defaults.items():
            spec = nb.ranges.get(name)
            print(f"    {name} = {value!r}" + (f"  {spec}" if spec else ""))
    return 0


def _run_all(
    project: runner.Project,
    names,
    profile: str,
    sets,
    *,
    force=False,
    timeout=None,
    executor="local",
    scheduler=None,
    workers=None,
    seed_family=0,
    progress=None,
):
    """Run the planned notebooks, a line per notebook as it ends; with `progress` (default:
    when stderr is a terminal) the running chapters' progress lines on stderr."""
    planned = runner.plan(project, names, profile, runner.parse_sets(sets))  # bad input first
    from tqdm import tqdm

    from .. import report
    from . import estimate, executors

    if profile == "paper":
        plan = estimate.estimate(project, planned, profile, force=force)
        print("\n".join(estimate.table(plan, profile)), file=sys.stderr)
        print(
            "paper profile: each sweep prints an ETA from a short calibration, then its progress; "
            "its chunks are kept in "
            f"{project.executed_dir / '.chunks'}, so an interrupted run resumes where it stopped",
            file=sys.stderr,
        )
    results = []
    with (
        executors.make(executor, scheduler=scheduler, workers=workers) as pool,
        tqdm(total=len(planned), desc=f"notebooks [{profile}]", unit="nb", file=sys.stderr) as bar,
    ):
        shown = sys.stderr.isatty() if progress is None else progress
        for result in runner.execute_all(
            project,
            planned,
            profile,
            force=force,
            timeout=timeout,
            executor=pool,
            stream=profile == "paper",
            seed_family=seed_family,
            echo=functools.partial(bar.write, file=sys.stderr) if shown else None,
        ):
            counts = Counter(report.outcome(r) for r in result.records)
            bar.write(
                f"{result.name}: {result.status} in {result.seconds:.1f} s; "
                f"verdicts {counts['reproduced']}/{len(result.records)} reproduced"
                + "".join(f", {counts[o]} {o}" for o in report.OUTCOMES[1:] if counts[o])
            )
            bar.update()
            results.append(result)
    return results


# The fields of a verdict record that `collapse verdicts --json` prints, in this order.
_JSON_FIELDS = (
    "id",
    "notebook",
    "key",
    "kind",
    "claim",
    "source",
    "quote",
    "measured",
    "expected",
    "passed",
    "decided",
    "outcome",
    "profile",
    "seed_family",
)


def _verdicts(project: runner.Project, as_json: bool) -> int:
    from .. import report
    from . import scoreboard

    records = runner.collect_records(project)
    problems = scoreboard.check_expectations(records, project.expectations())
    if as_json:
        rows = [{**r, "outcome": report.outcome(r)} for r in records]
        print(json.dumps([{k: r.get(k) for k in _JSON_FIELDS} for r in rows], indent=1))
    else:
        for r in records:
            print(
                f"{report.outcome(r):15} {r['kind']:9} {r['id']:52} [{r['profile']}]  "
                f"{r['measured']}  (expected {r['expected']})"
            )
        print(f"{len(records)} verdicts")
        for line in scoreboard.counts_text(records):
            print(f"  {line}")
    for line in problems:
        print(f"differs from expectations.yml: {line}", file=sys.stderr)
    if not records:
        print(
            "no executed notebooks: run `collapse run` or `collapse book` first", file=sys.stderr
        )
    return 1 if problems else 0


def _reseed(project: runner.Project, names, families: int, book: str, timeout) -> int:
    """The fast profile with every family, then the book profile for the chapters it did not
    settle (or all, or none); notebooks/reseed.yml records both."""
    from . import reseed

    runs = _reseed_profile(
        project, runner.plan(project, names, "fast", {}), "fast", families, timeout
    )
    failed = _any_failed(runs)
    if book != "none":
        wanted = None if book == "all" else set(reseed.unsettled(runs))
        chosen = [
            (nb, params)
            for nb, params in runner.plan(project, names, "book", {})
            if wanted is None or nb.name in wanted
        ]
        print(
            f"book profile for {len(chosen)} chapter(s): "
            + (", ".join(nb.name for nb, _ in chosen) or "none unsettled")
        )
        if chosen:
            failed |= _any_failed(_reseed_profile(project, chosen, "book", families, timeout))
    print(f"recorded in {project.notebooks_dir / reseed.RESEED_FILE}")
    return 1 if failed else 0


def _reseed_profile(project, planned, profile: str, families: int, timeout) -> dict:
    """Run `planned` with every family at `profile`, record it, print what held."""
    from tqdm import tqdm

    from .. import report
    from . import reseed

    total = len(planned) * families
    with tqdm(total=total, desc=f"reseed [{profile}]", unit="run", file=sys.stderr) as bar:

        def progress(run):
            counts = Counter(report.outcome(r) for r in run.records)
            said = run.error or ", ".join(f"{n} {o}" for o, n in counts.items())
            bar.write(f"{run.notebook} family {run.family}: {said}")
            bar.update()

        runs = reseed.run_families(
            project, planned, profile, families, timeout=timeout, progress=progress
        )
    data = reseed.merge(reseed.read(project), profile, families, runs)
    reseed.write(project, data)
    print("\n".join(reseed.summary_lines(data, profile)))
    return runs


def _any_failed(runs: dict) -> bool:
    return any(run.error for chapter in runs.values() for run in chapter)


def _merged(base: dict, extra: dict) -> dict:
    """`base` with `extra` written over it, nested dictionaries merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = _merged(merged[key], value)
        merged[key] = value
    return merged


def _launch_config(project: runner.Project, url: str, branch: str, output: Path) -> Path:
    """The book's _config.yml with the launch buttons for `url` turned on, written into the
    build folder. Local extensions are made absolute: Jupyter Book finds them from the
    configuration file's folder."""
    import yaml

    from . import launch

    config = yaml.safe_load((project.root / "_config.yml").read_text())
    baseurl = config.get("html", {}).get("baseurl", "")
    config = _merged(config, launch.settings(url, branch, baseurl))
    extensions = config.get("sphinx", {}).get("local_extensions", {})
    for name, folder in extensions.items():
        extensions[name] = str((project.root / folder).resolve())
    output.mkdir(parents=True, exist_ok=True)
    path = output / "_config.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _book(
    project: runner.Project,
    profile: str,
    student: bool = False,
    repository: str | None = None,
    branch: str = "gh-pages",
    pdf: bool = False,
    progress: bool | None = None,
    **executor,
) -> int:
    """Run what is stale (with the chapters' `progress`, as `collapse run`), then a clean
    build: the full book into _build/html (with launch buttons when the repository is known,
    and its PDF if asked, a line per page on stderr as it prints), or the student edition into
    _build/student/html.
    """
    import yaml

    from . import assignments, launch, mathjax, pages, reseed, scoreboard, status

    url = repository
    if url is None and not student:
        url = (
            yaml.safe_load((project.root / "_config.yml").read_text())
            .get("repository", {})
            .get("url")
            or None
        )
    # checks the URL before anything runs: an empty --repository too, not taken for none
    install = (
        launch.package_spec(url, launch.source_commit(project.root)) if url is not None else None
    )
    if pdf:
        from . import pdf as book_pdf

        book_pdf.require()  # before minutes of notebooks, as MathJax below
    mathjax.require(project.root)  # before minutes of notebooks: the build needs the local copy
    _run_all(project, [], profile, [], progress=progress, **executor)
    records, expectations = runner.collect_records(project), project.expectations()
    pages.prepare_all(project.executed_dir, records, expectations, install)
    scoreboard.write_pages(project.root, records, expectations, reseed.read(project))
    status.write_status(project.root, records)
    jupyter_book = shutil.which(
        "jupyter-book", path=str(Path(sys.executable).parent)
    ) or shutil.which("jupyter-book")
    if jupyter_book is None:
        raise ParameterError(
            "jupyter-book is not installed: pip install 'collapse[book]' (or run `make book`)"
        )
    output = project.root / "_build" / "student" if student else project.root / "_build"
    shutil.rmtree(output, ignore_errors=True)  # a clean build: incremental ones hide warnings
    source = output / "source" if student else project.root
    if student:
        assignments.stage_student_edition(project, source)
    command = [jupyter_book, "build", str(source), "-W", "-n", "--keep-going"]
    if url:
        command += ["--config", str(_launch_config(project, url, branch, output))]
    returncode = subprocess.run(command).returncode
    if student and (source / "_build" / "html").is_dir():
        (source / "_build" / "html").replace(output / "html")
    if returncode:
        return 1
    site = output / "html"
    if url:
        launch.write_binder(site, project.root / "binder" / "requirements.txt", install)
        print(f"launch buttons: Colab and Binder open the notebooks from {url} ({branch})")
    print(f"{'student edition' if student else 'book'}: {site / 'index.html'}")
    if pdf:
        result = book_pdf.write_pdf(project.root, site, progress=_to_stderr)
        print(f"pdf: {result.path} ({result.pages} pages)")
    return 0


def _to_stderr(line: str) -> None:
    """A progress line, on stderr at once (stdout keeps the results)."""
    print(line, file=sys.stderr, flush=True)


def _assignments(project: runner.Project, names, out: Path | None) -> int:
    from . import assignments

    for path in assignments.write_assignments(
        project, names, out or project.root / "_build" / "assignments"
    ):
        print(f"assignment: {path}")
    return 0


def _grade(project: runner.Project, args) -> int:
    """Grade every submission; with one, print its checks; with --csv, write the gradebook."""
    from . import assignments, grading, sandbox

    book = None if args.csv is None else grading.gradebook_path(args.csv)  # before any grading
    files = grading.collect(args.paths)
    limits = {"processes": args.processes, "max_time": args.max_time}
    box = sandbox.sandbox(project.root, args.memory, **limits)
    print(
        f"grading {len(files)} submission(s), {min(args.jobs, len(files))} at a time: "
        f"{assignments.PROFILE} profile, {args.timeout} s per cell, {box.describe()}",
        flush=True,
    )
    grades = grading.grade_class(
        project, files, timeout=args.timeout, memory_mb=args.memory, jobs=args.jobs, book=book,
        report=lambda g: print(g.summary(remark=len(files) > 1), flush=True), **limits,
    )  # fmt: skip
    if len(grades) == 1 and not grades[0].error:
        for line in [*grades[0].notes, *grades[0].problems]:
            print(f"  {line}")
        print(grades[0].table())
    if book is not None:  # written after each row already
        print(f"gradebook: {book}")
    return 0 if all(g.passed for g in grades) else 1


def main(argv=None) -> int:
    try:
        args = _parse(argv)
        project = runner.Project.at(args.root) if args.root else runner.Project.find()
        if args.command == "list":
            return _list(project)
        if args.command == "run" and args.dry_run:
            from . import estimate

            planned = runner.plan(project, args.names, args.profile, runner.parse_sets(args.sets))
            plan = estimate.estimate(project, planned, args.profile, force=args.force)
            print("\n".join(estimate.table(plan, args.profile)))
            return 0
        if args.command == "run":
            pool = dict(executor=args.executor, scheduler=args.scheduler, workers=args.workers)
            results = _run_all(
                project,
                args.names,
                args.profile,
                args.sets,
                force=args.force,
                timeout=args.timeout,
                seed_family=args.seed_family,
                progress=args.progress,
                **pool,
            )
            return 0 if results else 1
        if args.command == "verdicts":
            return _verdicts(project, args.json)
        if args.command == "reseed":
            return _reseed(project, args.names, args.families, args.book, args.timeout)
        if args.command == "assignments":
            return _assignments(project, args.names, args.out)
        if args.command == "publish":
            return publish.main(argv)  # its own parser, which collapse.book.main uses directly
        if args.command == "grade":
            return _grade(project, args)
        return _book(
            project,
            args.profile,
            args.student,
            repository=args.repository,
            branch=args.branch,
            pdf=args.pdf,
            progress=args.progress,
            executor=args.executor,
            scheduler=args.scheduler,
            workers=args.workers,
        )
    except ParameterError as err:
        print(f"collapse: error: {err}", file=sys.stderr)
        return 2
    except runner.NotebookError as err:
        print(f"collapse: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("collapse: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
