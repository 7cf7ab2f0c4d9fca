"""The GitHub workflows: valid against GitHub's schema, clean under zizmor's security audit,
and doing what the README says (build with `make book`, deploy with exactly the permissions
Pages needs, test with `make test`).

Both validators run offline: check-jsonschema with its vendored workflow schema, zizmor with
--offline (its default policy: every action pinned to a commit). Each is also shown a broken
copy, so that a validator which accepts anything fails here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
BOOK = WORKFLOWS / "book.yml"
TEST = WORKFLOWS / "test.yml"
BIN = Path(sys.executable).parent  # the test extra installs both tools beside pytest
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


def _schema_errors(path: Path) -> str:
    result = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", path],
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
    assert build["container"] == "python:3.11-bookworm"
    make = next(step for step in build["steps"] if step.get("run") == "make book")
    assert make["env"]["BOOK_ARGS"] == "--repository https://github.com/${{ github.repository }}"
    upload = next(s for s in build["steps"] if _uses(s) == "actions/upload-pages-artifact")
    assert upload["with"]["path"] == "_build/html"

    # The executed chapters are restored from the nearest earlier build, keyed by the
    # project's own content.
    caches = {s["with"]["path"]: s["with"] for s in build["steps"] if _uses(s) == "actions/cache"}
    executed = caches["book/executed"]
    for source in ("notebooks/**", "collapse/**", "pyproject.toml"):
        assert f"'{source}'" in executed["key"]
    assert executed["key"].startswith(executed["restore-keys"])
    assert "~/.cache/pip" in caches

    on_main = "github.ref == 'refs/heads/main'"  # never on a pull request's merge ref
    deploy = workflow["jobs"]["deploy"]
    assert deploy["if"] == on_main and deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write", "contents": "read"}
    assert deploy["environment"]["name"] == "github-pages"
    assert [_uses(step) for step in deploy["steps"]] == ["actions/deploy-pages"]

    notebooks = workflow["jobs"]["notebooks"]
    assert notebooks["if"] == on_main and notebooks["needs"] == "build"
    assert notebooks["permissions"] == {"contents": "write"}
    publish = next(s for s in notebooks["steps"] if "collapse publish" in s.get("run", ""))
    assert '--remote "https://x-access-token:${GITHUB_TOKEN}@' in publish["run"]
    assert publish["env"] == {"GITHUB_TOKEN": "${{ github.token }}"}


def test_the_test_workflow_runs_make_test_under_ci():
    workflow = _load(TEST)
    assert set(workflow["on"]) == {"push", "pull_request"}
    assert workflow["permissions"] == {}
    (job,) = workflow["jobs"].values()
    assert job["permissions"] == {"contents": "read"}
    assert job["container"] == "python:3.11-bookworm"
    assert job["env"]["CI"] == "true"
    assert [step.get("run") for step in job["steps"]][-1] == "make test"


@pytest.mark.parametrize("path", [BOOK, TEST], ids=lambda p: p.name)
def test_no_script_expands_a_template_or_hides_a_failing_pipe(path):
    workflow = _load(path)
    scripts = [s["run"] for job in workflow["jobs"].values() for s in job["steps"] if "run" in s]
    assert not [script for script in scripts if "${{" in script]  # values come in through env
    assert _pipes_without_pipefail(workflow) == []


def test_a_pipe_under_sh_or_plain_bash_is_caught():
    workflow = _load(TEST)
    job = workflow["jobs"]["test"]
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
