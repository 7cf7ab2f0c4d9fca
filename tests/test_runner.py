"""The runner and the `collapse` command on a small project of toy notebooks."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from collapse.book import runner
from collapse.checks import ParameterError

HEADER = """\
---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
collapse:
  claim: "{claim}"
  paper_ref: "Toy 2026"
  ranges:
{ranges}
---
"""

TOY = HEADER.format(
    claim="A sum exceeds a threshold",
    ranges=(
        "    n_layers: {min: 1, max: 1000}\n"
        "    scale: {min: 0.0, exclusive_min: true}\n"
        "    masks: {choices: [causal, complete], min_items: 1}"
    ),
) + textwrap.dedent(
    """
    # Toy

    ```{code-cell} ipython3
    :tags: [parameters]
    n_layers = 4
    scale = 1.5
    masks = ["causal"]
    label = "toy"
    ```

    ```{code-cell} ipython3
    from collapse import report
    total = n_layers * scale
    sum_above = report.above("the sum", total, 5)
    report.check("sum-exceeds", "the sum exceeds 5", sum_above, kind="extension")
    ```
    """
)

RAISES = HEADER.format(claim="Raises on purpose", ranges="    n: {min: 0}") + textwrap.dedent(
    """
    # Raises

    ```{code-cell} ipython3
    :tags: [parameters]
    n = 1
    ```

    ```{code-cell} ipython3
    raise ValueError(f"broken on purpose with n={n}")
    ```
    """
)


@pytest.fixture
def project(tmp_path):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "01-toy.md").write_text(TOY)
    (notebooks / "02-raises.md").write_text(RAISES)
    (notebooks / "profiles.yml").write_text(
        "fast:\n  01-toy: {n_layers: 2}\nbook: {}\npaper:\n  01-toy: {n_layers: 100}\n"
    )
    (notebooks / "expectations.yml").write_text(
        "01-toy:\n  sum-exceeds: {fast: not-reproduced, book: reproduced}\n"
    )
    return runner.Project(tmp_path)


def cli(project, *args):
    command = [sys.executable, "-m", "collapse", "--root", str(project.root), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_resolve_applies_profile_then_set(project):
    toy = project.select(["01"])[0]
    assert project.resolve(toy, "book", {}) == {
        "n_layers": 4,
        "scale": 1.5,
        "masks": ["causal"],
        "label": "toy",
    }
    assert project.resolve(toy, "fast", {})["n_layers"] == 2
    resolved = project.resolve(
        toy, "fast", {"n_layers": 7, "scale": 2, "masks": ["complete", "causal"]}
    )
    assert (
        resolved["n_layers"] == 7
        and resolved["scale"] == 2.0
        and isinstance(resolved["scale"], float)
    )


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"n_layers": -3}, "parameter n_layers must be >= 1, got -3"),
        ({"n_layers": 2.5}, "parameter n_layers must be an int, got 2.5"),
        ({"n_layers": True}, "parameter n_layers must be an int, got True"),
        ({"scale": 0}, "parameter scale must be > 0.0, got 0"),
        (
            {"masks": ["causal", "bidirectional"]},
            "parameter masks must be one of causal, complete; got 'bidirectional'",
        ),
        ({"masks": []}, "parameter masks must have at least 1 items"),
        ({"masks": "causal"}, "parameter masks must be a list"),
        ({"label": 3}, "parameter label must be a string, got 3"),
    ],
)
def test_bad_parameters(project, overrides, match):
    with pytest.raises(ParameterError, match=match):
        runner.plan(project, ["01-toy"], "book", overrides)


def test_a_full_name_whose_number_moved_finds_its_chapter(project):
    """An assignment made before chapters were split and renumbered names its chapter by its
    old number: the name without number still finds it, for `collapse grade` and `run`."""
    assert [nb.name for nb in project.select(["05-toy", "toy", "01"])] == ["01-toy"] * 3
    with pytest.raises(ParameterError, match="got '05-elsewhere'"):
        project.select(["05-elsewhere"])


def test_verdicts_of_a_chapter_that_moved_are_not_collected(project):
    """A notebook executed under a chapter's old name (left in book/executed/ by a run before
    a renumbering) is not one of the project's chapters: its verdicts are not collected."""
    project.executed_dir.mkdir(parents=True, exist_ok=True)
    for stem, key in [("01-toy", "current"), ("03-toy", "moved"), ("02-gone", "gone")]:
        record = [{"id": f"toy/{key}", "key": key, "notebook": stem}]
        (project.executed_dir / f"{stem}.verdicts.json").write_text(json.dumps(record))
    assert [r["key"] for r in runner.collect_records(project)] == ["current"]


def test_unknown_names(project):
    with pytest.raises(
        ParameterError, match="notebook must be one of 01-toy, 02-raises; got 'nope'"
    ):
        project.select(["nope"])
    with pytest.raises(ParameterError, match="--set depth: not a parameter of 01-toy"):
        runner.plan(project, ["toy"], "book", {"depth": 3})
    with pytest.raises(
        ParameterError, match="profile must be one of fast, book, paper; got 'huge'"
    ):
        runner.plan(project, ["toy"], "huge", {})


@pytest.mark.execution
def test_run_caches_until_something_changes(project):
    ((toy, params),) = runner.plan(project, ["toy"], "book", {})
    first = runner.execute(project, toy, params, "book")
    assert first.status == "executed" and first.output.is_file()
    record = first.records[0]
    assert {k: record[k] for k in ("id", "key", "claim", "measured", "expected")} == {
        "id": "toy/sum-exceeds", "key": "sum-exceeds", "claim": "the sum exceeds 5",
        "measured": "the sum: $6$", "expected": "the sum $> 5$",
    }  # fmt: skip
    assert (record["passed"], record["decided"], record["kind"]) == (True, True, "extension")
    assert (record["notebook"], record["profile"], record["seed_family"]) == ("01-toy", "book", 0)
    assert runner.execute(project, toy, params, "book").status == "cached"
    ((_, fast_params),) = runner.plan(project, ["toy"], "fast", {})
    second = runner.execute(project, toy, fast_params, "fast")
    assert second.status == "executed" and second.records[0]["passed"] is False
    executed = json.loads(second.output.read_text())
    assert executed["metadata"]["collapse"]["parameters"]["n_layers"] == 2
    # the source is named, not copied whole (it would carry solutions to a student's download)
    assert executed["metadata"]["papermill"]["input_path"] == "01-toy.md"
    assert not list(project.executed_dir.glob(".*partial"))


def test_two_runs_of_a_chapter_at_once_never_share_a_scratch_file(project, monkeypatch):
    """A second `collapse run 01` while the first runs: papermill writes each run's notebook
    into a scratch file of its own, and the second, ending first, leaves the first's alone."""
    import nbformat

    ((toy, params),) = runner.plan(project, ["toy"], "book", {})
    scratch = []

    def papermill(source, output, *args):
        scratch.append(output)
        output.write_text("{}")  # papermill saves the notebook as its cells run
        if len(scratch) == 1:
            runner.execute(project, toy, params, "book", force=True)  # the other run
            assert output.read_text() == "{}", "the other run removed or rewrote this scratch file"
        return nbformat.v4.new_notebook()

    monkeypatch.setattr(runner, "_papermill", papermill)
    assert runner.execute(project, toy, params, "book", force=True).status == "executed"
    assert len(set(scratch)) == 2 and all(p.parent == project.executed_dir for p in scratch)
    assert not [p.name for p in project.executed_dir.iterdir() if p.name.startswith(".")]


@pytest.mark.execution
def test_a_raising_notebook_names_cell_and_error(project):
    ((nb, params),) = runner.plan(project, ["02"], "book", {})
    expected = (
        r"notebook 02-raises failed in cell In\[\d\] `raise ValueError\(.*`: "
        r"ValueError: broken on purpose with n=1"
    )
    with pytest.raises(runner.NotebookError, match=expected):
        runner.execute(project, nb, params, "book")
    assert not (project.executed_dir / "02-raises.ipynb").exists()
    assert not list(project.executed_dir.glob(".*"))


@pytest.mark.execution
def test_cli_run_verdicts_and_expectations(project):
    result = cli(project, "run", "toy", "--profile", "fast")
    assert result.returncode == 0, result.stderr
    assert "01-toy: executed in" in result.stdout and "verdicts 0/1 reproduced" in result.stdout
    verdicts = cli(project, "verdicts", "--json")
    assert verdicts.returncode == 0, verdicts.stderr
    (record,) = json.loads(verdicts.stdout)
    assert set(record) >= {
        "id",
        "notebook",
        "kind",
        "claim",
        "source",
        "quote",
        "measured",
        "expected",
        "outcome",
        "profile",
        "seed_family",
    }
    assert record["profile"] == "fast" and record["passed"] is False
    # The book profile reproduces; expectations say so, so the table is clean ...
    assert cli(project, "run", "toy").returncode == 0
    assert cli(project, "verdicts").returncode == 0
    # ... until the outcome changes under a parameter set where the claim cannot hold.
    assert cli(project, "run", "toy", "--set", "scale=0.5").returncode == 0
    changed = cli(project, "verdicts")
    assert changed.returncode == 1
    assert (
        "differs from expectations.yml: "
        "01-toy sum-exceeds [book]: not-reproduced, expected reproduced" in changed.stderr
    )


@pytest.mark.execution
def test_cli_raising_notebook_exits_1_with_the_error(project):
    result = cli(project, "run", "02-raises")
    assert result.returncode == 1
    assert (
        "ValueError: broken on purpose with n=1" in result.stderr
        and "failed in cell In[" in result.stderr
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "nope"], "notebook must be one of 01-toy, 02-raises; got 'nope'"),
        (
            ["run", "toy", "--set", "depth=3"],
            "--set depth: not a parameter of 01-toy (allowed: label, masks, n_layers, scale)",
        ),
        (["run", "toy", "--set", "n_layers=-3"], "parameter n_layers must be >= 1, got -3"),
        (
            ["run", "toy", "--set", "n_layers=many"],
            "parameter n_layers must be an int, got 'many'",
        ),
        (["run", "toy", "--set", "n_layers"], "--set takes key=value, got 'n_layers'"),
        (
            ["run", "toy", "--profile", "huge"],
            "profile must be one of fast, book, paper; got 'huge'",
        ),
        (["--bogus"], "unrecognized option --bogus (see collapse --help)"),
        (["--bogus", "run", "toy"], "unrecognized option --bogus (see collapse --help)"),
        (["run", "toy", "--bogus"], "unrecognized option --bogus (see collapse run --help)"),
        (["verdicts", "toy"], "unrecognized argument toy (see collapse verdicts --help)"),
        ([], "a command is required (see collapse --help)"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line_and_writes_nothing(project, args, message):
    result = cli(project, *args)
    assert result.returncode == 2
    assert result.stderr.strip() == f"collapse: error: {message}"
    assert not project.executed_dir.exists()


@pytest.mark.parametrize(
    "profiles, message",
    [
        ("fast: [1, 2\n", "notebooks/profiles.yml is not valid YAML (line 2)"),
        ("- fast\n", "notebooks/profiles.yml must be a mapping, got list"),
        (
            "quick: {}\n",
            "notebooks/profiles.yml: profile must be one of fast, book, paper; got 'quick'",
        ),
        (
            "fast: [01-toy]\n",
            "notebooks/profiles.yml: profile 'fast' must map notebook names to {parameter: value}",
        ),
        (
            "fast:\n  01-toy: {depth: 2}\n",
            "notebooks/profiles.yml [fast]: 'depth' is not a parameter of 01-toy",
        ),
        ("fast:\n  01-toy: {n_layers: zero}\n", "parameter n_layers must be an int, got 'zero'"),
    ],
)
def test_cli_malformed_profiles_exit_2(project, profiles, message):
    (project.notebooks_dir / "profiles.yml").write_text(profiles)
    result = cli(project, "run", "toy", "--profile", "fast")
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"collapse: error: {message}")
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_list_shows_claims_and_parameters(project):
    result = cli(project, "list")
    assert result.returncode == 0
    assert "01-toy  A sum exceeds a threshold  [Toy 2026]" in result.stdout
    assert "n_layers = 4" in result.stdout


def test_a_reader_that_closes_the_pipe_gets_no_traceback(project):
    """`collapse list | head`: the command stops at the closed pipe with status 1 (Python's
    convention for EPIPE), and says nothing on stderr."""
    command = [sys.executable, "-m", "collapse", "--root", str(project.root), "list"]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()  # before the command writes its first line
    _, stderr = child.communicate(timeout=60)
    assert (child.returncode, stderr.decode()) == (1, "")


def test_parse_assignments_rejects_code():
    assert runner.parse_assignments("a = 1\nb = [1, 'x']\nc = -2.5") == {
        "a": 1,
        "b": [1, "x"],
        "c": -2.5,
    }
    with pytest.raises(ParameterError, match="only `name = literal` lines"):
        runner.parse_assignments("import os")
    with pytest.raises(ParameterError, match="parameter 'a' must be a literal value"):
        runner.parse_assignments("a = f(1)")


@pytest.mark.execution
def test_a_cell_timeout_is_reported_not_fatal(project):
    (project.notebooks_dir / "03-sleeps.md").write_text(
        HEADER.format(claim="Sleeps", ranges="    n: {min: 0}")
        + (
            "\n```{code-cell} ipython3\n:tags: [parameters]\nn = 1\n```\n\n"
            "```{code-cell} ipython3\nimport time\ntime.sleep(60)\n```\n"
        )
    )
    ((nb, params),) = runner.plan(project, ["03"], "book", {})
    with pytest.raises(runner.NotebookError, match="notebook 03-sleeps failed"):
        runner.execute(project, nb, params, "book", timeout=2)
    assert not (project.executed_dir / "03-sleeps.ipynb").exists()


CHUNKS_ENV = HEADER.format(
    claim="The kernel sees the chunk folder", ranges="    n: {min: 0}"
) + textwrap.dedent(
    """
    # Chunk folder

    ```{code-cell} ipython3
    :tags: [parameters]
    n = 1
    ```

    ```{code-cell} ipython3
    import os
    import sys
    from collapse import report
    folder = os.environ.get("COLLAPSE_CHUNKS", "")
    print("from the kernel's stderr", file=sys.stderr)
    is_set = report.requires("a folder", bool(folder))
    report.check("folder", "the folder is set", is_set, kind="sanity", note=folder or "unset")
    ```
    """
)


@pytest.mark.execution
def test_the_paper_profile_gives_sweeps_a_chunk_folder_and_streams_stderr(tmp_path, capfd):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "01-env.md").write_text(CHUNKS_ENV)
    (tmp_path / "notebooks" / "profiles.yml").write_text("book: {}\n")
    project = runner.Project(tmp_path)
    (nb,) = project.select([])
    book = runner.execute(project, nb, {"n": 1}, "book")
    assert book.records[0]["measured"] == "unset; a folder: no ()"
    paper = runner.execute(project, nb, {"n": 1}, "paper", stream=True)
    folder = str(tmp_path / "book" / "executed" / ".chunks")
    assert paper.records[0]["measured"] == f"{folder}; a folder: yes"
    assert "from the kernel's stderr" in capfd.readouterr().err
    assert "COLLAPSE_CHUNKS" not in os.environ


@pytest.mark.execution
def test_cli_executor_options(project):
    pytest.importorskip("distributed")
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "collapse", "--root", str(project.root), "run", "01", *a],
        capture_output=True,
        text=True,
    )
    bad = run("--scheduler", "tcp://127.0.0.1:1")
    assert bad.returncode == 2 and "need --executor dask" in bad.stderr
    assert run("--executor", "spark").returncode == 2
    ok = run("--profile", "book", "--executor", "dask", "--workers", "2")
    assert ok.returncode == 0 and "01-toy: executed" in ok.stdout + ok.stderr, ok.stderr[-2000:]


SEEDS = HEADER.format(claim="Seeds of a family", ranges="    n: {min: 1}") + textwrap.dedent(
    """
    # Seeds

    ```{code-cell} ipython3
    :tags: [parameters]
    n = 2
    ```

    ```{code-cell} ipython3
    from collapse import report, rng
    seeds = rng.seeds(n)
    small = report.below("the first seed", seeds[0], 10)
    report.check("first-seed-small", "the seeds are the book's", small, kind="extension")
    ```
    """
)


@pytest.mark.execution
def test_another_family_of_seeds_runs_apart_and_reseed_counts_the_outcomes(project):
    (project.notebooks_dir / "03-seeds.md").write_text(SEEDS)
    bad = cli(project, "run", "03", "--seed-family", "-1")
    assert bad.returncode == 2 and "--seed-family must be an int >= 0" in bad.stderr
    run = cli(project, "run", "03", "--seed-family", "1")
    assert run.returncode == 0, run.stderr
    folder = project.executed_dir / "families" / "book" / "family-1"
    (record,) = json.loads((folder / "03-seeds.verdicts.json").read_text())
    assert record["seed_family"] == 1 and record["passed"] is False
    assert "$1 \\times 10^{6}$" in record["measured"]
    assert not (project.executed_dir / "03-seeds.ipynb").exists()  # the book's own: untouched
    first_run = (folder / "03-seeds.ipynb").stat().st_mtime_ns
    again = cli(project, "reseed", "03", "--families", "2", "--book", "all")
    assert again.returncode == 0, again.stderr
    assert "fast: 0 of 1 verdicts held in all 2 families" in again.stdout
    assert "differs between families: seeds/first-seed-small" in again.stdout
    recorded = yaml.safe_load((project.notebooks_dir / "reseed.yml").read_text())
    for profile in ("fast", "book"):
        chapter = recorded[profile]["chapters"]["03-seeds"]
        assert chapter["verdicts"]["first-seed-small"] == {"reproduced": 1, "not-reproduced": 1}
        assert set(chapter["runs"]) == {0, 1} and all(
            len(d) == 64 for d in chapter["runs"].values()
        )
    assert "03-seeds family 1: 1 not-reproduced" in again.stdout
    # family 1 of the book profile had run above: the reseed reused it
    assert (folder / "03-seeds.ipynb").stat().st_mtime_ns == first_run


def test_the_light_myst_reader_reads_every_chapter_as_jupytext_does():
    """runner.read_myst (no jupytext import) gives jupytext's header and code cells."""
    import jupytext

    chapters = sorted((runner.PACKAGE.parent / "notebooks").glob("[0-9][0-9]-*.md"))
    assert len(chapters) == 22
    for path in chapters:
        nb = jupytext.read(path)
        header, cells = runner.read_myst(path.read_text())
        code = [(c.source, c.metadata.get("tags", [])) for c in nb.cells if c.cell_type == "code"]
        assert cells == code, path.stem
        assert header["collapse"] == nb.metadata["collapse"], path.stem


def test_help_version_and_list_import_neither_torch_nor_jupytext():
    """`collapse --help`, `--version` and `collapse list` answer at once: the heavy imports
    wait for the commands that need them (counted by module, not by the clock)."""
    script = (
        "import sys, contextlib, io\n"
        "from collapse.book import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['list']) == 0\n"
        "    for option in ('--help', '--version'):\n"
        "        try:\n"
        "            main([option])\n"
        "        except SystemExit as done:\n"
        "            assert done.code == 0\n"
        "heavy = {'torch', 'pandas', 'scipy', 'jupytext', 'papermill', 'matplotlib'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_version_is_the_distributions(monkeypatch):
    """`collapse --version` names the installed distribution's version: rank-collapse, else
    (installed under the former name) collapse, else unknown; never a traceback."""
    from importlib import metadata

    from collapse.book import cli

    result = subprocess.run(
        [sys.executable, "-m", "collapse", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == cli._version() != "collapse (rank-collapse) unknown"
    installed = {"collapse": "0.1.0"}

    def version(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(metadata, "version", version)
    assert cli._version() == "collapse (rank-collapse) 0.1.0"
    installed["rank-collapse"] = "0.2.0"
    assert cli._version() == "collapse (rank-collapse) 0.2.0"
    installed.clear()
    assert cli._version() == "collapse (rank-collapse) unknown"


def test_choices_masks_are_the_mask_registry():
    """`choices: masks` follows collapse.masks.REGISTRY: a mask added there is a choice."""
    from collapse import masks

    for name in masks.names():
        runner._check_range("extra_masks", [name], {"choices": "masks"})
    with pytest.raises(ParameterError, match="extra_masks must be one of complete, causal"):
        runner._check_range("extra_masks", ["causal", "nosuch"], {"choices": "masks"})
