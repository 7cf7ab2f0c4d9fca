"""The GitHub workflows: valid against GitHub's schema, clean under zizmor's security audit
and actionlint, and doing what the README says (build with `make book`, deploy with exactly the
permissions Pages needs, test with `make test`, publish with ghp-import alone).

The validators run offline: check-jsonschema with its vendored workflow and Dependabot
schemas, zizmor with --offline (its default policy: every action pinned to a commit),
actionlint (with shellcheck on the `run:` scripts when shellcheck is on PATH). Each is also
shown a broken copy, so that a validator which accepts anything fails here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
BOOK = WORKFLOWS / "book.yml"
TEST = WORKFLOWS / "test.yml"
DEPENDABOT = ROOT / ".github" / "dependabot.yml"
BIN = Path(sys.executable).parent  # the test extra installs the tools beside pytest
MAIN = "refs/heads/main"
UPLOAD = "actions/upload-artifact"
PIPE = re.compile(r"(?<!\|)\|(?!\|)")
PIPEFAIL = re.compile(r"^\s*set -[a-z]*o pipefail", re.MULTILINE)


def _load(path: Path) -> dict:
    workflow = yaml.safe_load(path.read_text())
    if True in workflow:  # YAML 1.1 reads the key `on` as a boolean
        workflow["on"] = workflow.pop(True)
    return workflow


def _tool(name: str) -> Path:
    tool = BIN / name
    if not tool.is_file():
        pytest.fail(f"{tool} is missing: install the test extra (pip install -e '.[test]')")
    return tool


def _actionlint() -> Path:
    """The test extra's actionlint, or a loud skip (a failure under CI, where `make test`
    installs it)."""
    tool = BIN / "actionlint"
    if not tool.is_file():
        message = f"WORKFLOWS NOT LINTED: no {tool} (install the test extra: make install)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return tool


def _actionlint_output(*paths: Path) -> str:
    """What actionlint prints about `paths`: nothing when it finds nothing."""
    result = subprocess.run(
        [_actionlint(), "-no-color", *paths], capture_output=True, text=True, cwd=ROOT
    )
    return result.stdout + result.stderr


def _schema_errors(path: Path, schema: str = "vendor.github-workflows") -> str:
    result = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", schema, path],
        capture_output=True,
        text=True,
    )
    return "" if result.returncode == 0 else result.stdout + result.stderr


def _zizmor_findings(path: Path) -> list[str]:
    result = subprocess.run(
        [_tool("zizmor"), "--offline", "--format", "json", path], capture_output=True, text=True
    )
    assert result.stdout.strip(), result.stderr  # findings or [], never nothing
    return sorted({finding["ident"] for finding in json.loads(result.stdout)})


def _uses(step: dict) -> str:
    return step.get("uses", "").split("@")[0]


def _cache_keys(job: dict) -> dict[str, dict]:
    """The job's cache steps (save and restore, or restore alone) by cached path."""
    caches = [s for s in job["steps"] if _uses(s) in ("actions/cache", "actions/cache/restore")]
    return {step["with"]["path"]: step["with"] for step in caches}


def _uploads_on_failure(job: dict) -> dict[str, list[str]]:
    """The artifacts the job uploads when it fails, by name: their paths, one a line."""
    steps = [s for s in job["steps"] if _uses(s) == UPLOAD and s.get("if") == "failure()"]
    return {step["with"]["name"]: step["with"]["path"].split() for step in steps}


def _pipes_without_pipefail(workflow: dict) -> list[str]:
    """The `run:` scripts that pipe but whose shell lets a failure in the pipe pass. GitHub
    runs `shell: bash` as `bash --noprofile --norc -eo pipefail {0}`; with no shell given it
    uses `bash -e {0}` (no pipefail), and plain `sh` in a container job."""
    default = workflow.get("defaults", {}).get("run", {}).get("shell")
    bad = []
    for job in workflow["jobs"].values():
        job_default = job.get("defaults", {}).get("run", {}).get("shell", default)
        for step in job.get("steps", []):
            script = step.get("run", "")
            shell = step.get("shell", job_default) or ("sh" if "container" in job else "bash -e")
            if PIPE.search(script) and shell != "bash" and not PIPEFAIL.search(script):
                bad.append(script)
    return bad


@pytest.mark.parametrize("path", [BOOK, TEST], ids=lambda p: p.name)
def test_the_workflow_is_valid_and_has_no_security_findings(path):
    assert _schema_errors(path) == ""
    assert _zizmor_findings(path) == []


def test_actionlint_finds_nothing_in_the_workflows():
    assert _actionlint_output(*sorted(WORKFLOWS.glob("*.yml"))) == ""


def test_actionlint_rejects_a_job_that_needs_a_missing_one(tmp_path):
    broken = tmp_path / "test.yml"
    broken.write_text(TEST.read_text().replace("needs: lint", "needs: lints", 1))
    assert _schema_errors(broken) == ""  # a schema cannot see it
    assert '"lints" which does not exist' in _actionlint_output(broken)


def test_dependabot_moves_the_actions_and_the_lock_weekly():
    assert _schema_errors(DEPENDABOT, "vendor.dependabot") == ""
    assert _zizmor_findings(DEPENDABOT) == []  # a week's cooldown for each ecosystem
    updates = yaml.safe_load(DEPENDABOT.read_text())["updates"]
    assert {u["package-ecosystem"]: u["directory"] for u in updates} == {
        "github-actions": "/",
        "pip": "/",  # requirements/lock.txt, from pyproject.toml
    }
    assert {u["schedule"]["interval"] for u in updates} == {"weekly"}


def test_the_validators_reject_broken_workflows(tmp_path):
    text = BOOK.read_text()
    misspelt = tmp_path / "misspelt.yml"
    misspelt.write_text(text.replace("runs-on:", "runs_on:", 1))
    assert "runs-on" in _schema_errors(misspelt)

    # A tag instead of a commit, a checkout that keeps its token, a template in a script.
    unsafe = tmp_path / "unsafe.yml"
    unsafe.write_text(
        re.sub(r"actions/cache@[0-9a-f]{40}", "actions/cache@v5", text)
        .replace("        with:\n          persist-credentials: false\n", "", 1)
        .replace("run: make book", "run: echo ${{ github.head_ref }} && make book")
    )
    assert _schema_errors(unsafe) == ""
    assert {"artipacked", "template-injection", "unpinned-uses"} <= set(_zizmor_findings(unsafe))


def test_the_book_is_built_on_pull_requests_and_published_from_main():
    workflow = _load(BOOK)
    assert set(workflow["on"]) == {"pull_request", "push", "workflow_dispatch"}
    assert workflow["on"]["push"]["branches"] == ["main"]
    assert workflow["permissions"] == {}
    assert workflow["concurrency"]["group"].startswith("pages")

    build = workflow["jobs"]["build"]
    assert build["permissions"] == {"contents": "read"}
    # Chromium prints the PDF: Docker's 64 MB of /dev/shm is too little.
    assert build["container"] == {"image": "python:3.11-bookworm", "options": "--shm-size=2g"}
    make = next(step for step in build["steps"] if step.get("run") == "make book")
    assert make["env"]["BOOK_ARGS"] == "--repository https://github.com/${{ github.repository }}"
    upload = next(s for s in build["steps"] if _uses(s) == "actions/upload-pages-artifact")
    assert upload["with"]["path"] == "_build/html"

    # The executed chapters are restored from the nearest earlier build, keyed by the
    # project's own content.
    caches = _cache_keys(build)
    executed = caches["book/executed"]
    for source in ("notebooks/**", "collapse/**", "pyproject.toml", "requirements/*.txt"):
        assert f"'{source}'" in executed["key"]
    assert executed["key"].startswith(executed["restore-keys"])
    for source in ("requirements/*.txt", "pyproject.toml", "Makefile"):
        assert f"'{source}'" in caches["~/.cache/pip"]["key"]
    assert _uploads_on_failure(build) == {"executed-notebooks": ["book/executed/"]}

    on_main = "github.ref == 'refs/heads/main'"  # never on a pull request's merge ref
    deploy = workflow["jobs"]["deploy"]
    assert deploy["if"] == on_main and deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write", "contents": "read"}
    assert deploy["environment"]["name"] == "github-pages"
    assert [_uses(step) for step in deploy["steps"]] == ["actions/deploy-pages"]

    # Publishing needs ghp-import and the package alone: no lock, no torch, no Jupyter Book.
    notebooks = workflow["jobs"]["notebooks"]
    assert notebooks["if"] == on_main and notebooks["needs"] == "build"
    assert notebooks["permissions"] == {"contents": "write"}
    scripts = [s["run"] for s in notebooks["steps"] if "run" in s]
    assert scripts[0].splitlines() == [
        "python -m pip install --quiet ghp-import==2.1.0",
        "python -m pip install --quiet --no-deps .",
    ]
    assert _cache_keys(notebooks) == {}
    publish = next(s for s in notebooks["steps"] if "collapse publish" in s.get("run", ""))
    assert '--remote "https://x-access-token:${GITHUB_TOKEN}@' in publish["run"]
    assert publish["env"] == {"GITHUB_TOKEN": "${{ github.token }}"}


def test_the_test_workflow_lints_then_runs_make_test_under_ci():
    workflow = _load(TEST)
    assert set(workflow["on"]) == {"push", "pull_request"}
    assert workflow["permissions"] == {}
    assert set(workflow["jobs"]) == {"lint", "test"}

    lint = workflow["jobs"]["lint"]
    assert lint["permissions"] == {"contents": "read"}
    assert [step.get("run") for step in lint["steps"]][-1] == "actionlint -color"
    # The actionlint of the test extra, installed from its lines of the lock (version, hashes).
    install = lint["steps"][-2]["run"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    test_extra = {re.match(r"[\w.-]+", r)[0] for r in project["optional-dependencies"]["test"]}
    assert re.search(r"/\^([\w.-]+)==/", install)[1] in test_extra
    assert "requirements/lock.txt" in install and "--require-hashes" in install

    job = workflow["jobs"]["test"]
    assert job["needs"] == "lint"
    assert job["permissions"] == {"contents": "read"}
    # The browser test's Chromium: Docker's 64 MB of /dev/shm is too little.
    assert job["container"] == {"image": "python:3.11-bookworm", "options": "--shm-size=2g"}
    assert job["env"] == {
        "CI": "true",
        "PYTEST_ADDOPTS": "--junitxml=_build/reports/junit.xml",
    }
    runs = [step.get("run") for step in job["steps"]]
    assert "make test" in runs
    key = _cache_keys(job)["~/.cache/pip"]["key"]
    for source in ("requirements/*.txt", "pyproject.toml", "Makefile"):
        assert f"'{source}'" in key
    uploads = _uploads_on_failure(job)
    assert set(uploads["test-reports"]) == {"_build/reports/", "_build/screenshots/"}
    assert any(path.endswith("/fast-book/project/book/executed/") for path in uploads["fast-book"])


def test_a_newer_push_cancels_only_off_main():
    concurrency = _load(TEST)["concurrency"]
    group = f"test-${{{{ github.ref == '{MAIN}' && github.run_id || github.ref }}}}"
    assert concurrency == {
        "group": group,  # on main, each run its own group: none waits to be cancelled
        "cancel-in-progress": f"${{{{ github.ref != '{MAIN}' }}}}",
    }


@pytest.mark.parametrize("path", [BOOK, TEST], ids=lambda p: p.name)
def test_pip_is_left_to_the_install_step(path):
    """`make install` chooses torch's CPU build itself: no extra index in the workflows."""
    workflow = _load(path)
    assert "env" not in workflow
    assert "PIP_EXTRA_INDEX_URL" not in path.read_text()


@pytest.mark.parametrize("path", [BOOK, TEST], ids=lambda p: p.name)
def test_no_script_expands_a_template_or_hides_a_failing_pipe(path):
    workflow = _load(path)
    scripts = [s["run"] for job in workflow["jobs"].values() for s in job["steps"] if "run" in s]
    assert not [script for script in scripts if "${{" in script]  # values come in through env
    assert _pipes_without_pipefail(workflow) == []


def test_a_pipe_under_sh_or_plain_bash_is_caught():
    workflow = _load(TEST)
    job = workflow["jobs"]["test"]
    workflow["jobs"] = {"test": job}  # the lint job pipes too
    job["steps"].append({"run": "make test | tee log"})
    assert _pipes_without_pipefail(workflow) == []  # the workflow's `shell: bash`
    del workflow["defaults"]
    assert _pipes_without_pipefail(workflow) == ["make test | tee log"]  # sh, in the container
    job["steps"][-1]["run"] = "set -euo pipefail\nmake test | tee log"
    assert _pipes_without_pipefail(workflow) == []
    del job["container"]
    job["steps"][-1]["run"] = "make test || true"
    assert _pipes_without_pipefail(workflow) == []  # `||` is not a pipe
    job["steps"][-1]["run"] = "make test |& tee log"
    assert len(_pipes_without_pipefail(workflow)) == 1  # bash -e {0}: no pipefail
