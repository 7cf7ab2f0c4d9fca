"""`make lab`: JupyterLab on 127.0.0.1 serving the MyST chapters as notebooks.

The test starts the make target itself (on a free port, with a token, no browser), then asks
the server for a chapter the way JupyterLab's notebook view does: jupytext's contents manager
must turn the .md into a notebook that keeps the book's parameters cell, and the lab settings
must open .md files with jupytext's notebook view.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "collapse-lab-test"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


@pytest.fixture
def lab():
    if not (ROOT / ".venv" / "bin" / "jupyter-lab").exists():
        if os.environ.get("CI") == "true":
            pytest.fail(".venv has no JupyterLab: `make install` installs the lab extra")
        pytest.skip("no .venv/bin/jupyter-lab: run `make install`")
    port = _free_port()
    args = f"--no-browser --port={port} --IdentityProvider.token={TOKEN}"
    server = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(ROOT), "lab", f"LAB_ARGS={args}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # make and the server stop together
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            if server.poll() is not None:
                pytest.fail(f"make lab exited {server.returncode}: {server.stdout.read()[-2000:]}")
            try:
                _get(f"{base}/api/status?token={TOKEN}")
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.5)
        else:
            pytest.fail("make lab did not answer on 127.0.0.1 within 120 s")
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_make_lab_serves_a_chapter_as_a_notebook_with_its_parameters_cell(lab):
    model = _get(f"{lab}/api/contents/01-mask-radius.md?type=notebook&token={TOKEN}")
    assert model["type"] == "notebook"
    cells = model["content"]["cells"]
    parameters = [c for c in cells if "parameters" in c["metadata"].get("tags", [])]
    assert len(parameters) == 1 and "n_layers" in parameters[0]["source"]
    assert cells[0]["cell_type"] == "markdown"


def test_make_lab_opens_markdown_with_the_notebook_view(lab):
    plugin = _get(f"{lab}/lab/api/settings/@jupyterlab/docmanager-extension:plugin?token={TOKEN}")
    viewers = plugin["schema"]["properties"]["defaultViewers"]["default"]  # overrides.json
    assert viewers["markdown"] == viewers["myst"] == "Jupytext Notebook"
