# Two entry points for a fresh machine (see README.md):
#   make book  - set up .venv, build the HTML book into _build/html
#   make test  - set up .venv, run ruff and every test
#   make check - ruff and the tests that execute no notebook and build no book (the quick loop)
#   make lab   - JupyterLab on 127.0.0.1 with the MyST chapters opening as notebooks
#   make lock  - re-resolve requirements/lock.txt (pip-tools, hashes) from pyproject.toml
# The install step installs the lock (requirements/install.py); torch's build comes from
# TORCH: cpu (default: PyTorch's CPU index on Linux when it answers) or cuda (PyPI's build).
# pyproject.toml keeps ranges, for a user's own environment.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# The torch build: TORCH=cuda once (make install TORCH=cuda) and later commands keep it.
TORCH  ?= $(shell cat $(VENV)/.torch 2>/dev/null || echo cpu)
STAMP  := $(VENV)/.installed-$(TORCH)
LOCK   := requirements/lock.txt
SHELL  := /bin/bash
.SHELLFLAGS := -eo pipefail -c

MATHJAX := book/_static/mathjax/VERSION
# cffconvert pins jsonschema<4, which Jupyter Book cannot use: it gets an environment of its own.
CFFCONVERT := $(VENV)/cffconvert/bin/cffconvert
# JupyterLab opens .md files (the chapters are MyST notebooks) with jupytext's notebook view.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
CHROMIUM := /usr/bin/chromium

.PHONY: install test check book bench clean browser lab lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml $(LOCK) requirements/torch.txt requirements/install.py | $(BIN)/python
	rm -f $(VENV)/.installed-*
	$(BIN)/python requirements/install.py --torch $(TORCH)
	echo $(TORCH) > $(VENV)/.torch
	touch $(STAMP)

# The book's local MathJax, copied from the PyPI package sphinx-mathjax-offline (pinned and
# checked; git-ignored), so the book reads offline.
$(MATHJAX): collapse/book/mathjax.py | $(STAMP)
	$(BIN)/python -m collapse.book.mathjax
	touch $@

$(CFFCONVERT): | $(BIN)/python
	$(PYTHON) -m venv $(VENV)/cffconvert
	$(VENV)/cffconvert/bin/python -m pip install --quiet cffconvert==2.0.0

$(LAB_SETTINGS): | $(STAMP)
	mkdir -p $(dir $@)
	printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin":' \
	  '  {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' > $@

install: $(STAMP) $(MATHJAX) $(CFFCONVERT) $(LAB_SETTINGS)

# Debian's Chromium for tests/test_browser.py: installed when missing and we are root (CI is);
# otherwise that test skips with a loud message (and fails when CI=true).
browser:
	@if [ ! -x $(CHROMIUM) ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium and chromium-driver (apt-get) for the browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else \
	    echo "*** $(CHROMIUM) is missing and this is not root: the browser test will be SKIPPED ***"; \
	  fi; \
	fi

# Two workers, a test module on one of them, in the order tests/conftest.py gives (the longest
# first, the tests that read the fast book last): both run the rest while the fast book is
# built in the background, then both run the tests that read it; the 25 slowest tests are
# listed at the end.
test: install browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadscope --no-loadscope-reorder --durations=25

# The quick loop for contributors: no notebook executed, no book built (pytest markers `book`
# and `execution` mark the slow tiers; tests/conftest.py).
check: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -q -m "not book and not execution"

# BOOK_ARGS: more options for `collapse book` (e.g. --repository https://github.com/ORG/REPO).
# The whole-book PDF needs Chromium; without it (and not root) the book is built without one.
book: install browser
	$(BIN)/collapse book --profile book $(if $(wildcard $(CHROMIUM)),--pdf) $(BOOK_ARGS)

# LAB_ARGS: more options for `jupyter lab` (e.g. --port=8890 --no-browser). As root (a
# container), Jupyter refuses to start without --allow-root.
lab: install
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=notebooks \
	  $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

bench: install
	$(BIN)/python benchmarks/san_throughput.py
	$(BIN)/python benchmarks/mtg_stable_rank.py
	$(BIN)/python benchmarks/mtg_gradients.py
	$(BIN)/python benchmarks/spectra.py
	$(BIN)/python benchmarks/chunked_resume.py
	$(BIN)/python benchmarks/notebook_times.py

# For CPython 3.11 on Linux x86-64 (where CI, Binder and the book run); torch's own line is
# left out (requirements/torch.txt pins it by version: its hash depends on the build).
lock: | $(BIN)/python
	$(BIN)/python -m pip install --quiet pip-tools==7.6.2
	$(BIN)/pip-compile pyproject.toml --quiet --extra book --extra test --extra pretrained \
	  --extra lab --extra pdf --generate-hashes --strip-extras --unsafe-package torch \
	  -c requirements/torch.txt --no-emit-find-links --no-emit-index-url -o $(LOCK)

clean:
	rm -rf _build book/executed
