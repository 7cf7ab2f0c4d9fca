# Two entry points for a fresh machine (see README.md):
#   make book  - set up .venv, build the HTML book into _build/html
#   make test  - set up .venv, run ruff and every test
#   make check - ruff and the tests that execute no notebook and build no book (the quick loop)
#   make lab   - JupyterLab on 127.0.0.1 with the MyST chapters opening as notebooks
# torch is pinned to the CPU wheel in the install step; pyproject.toml keeps a range.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SHELL  := /bin/bash
.SHELLFLAGS := -eo pipefail -c

MATHJAX := book/_static/mathjax/VERSION
# cffconvert pins jsonschema<4, which Jupyter Book cannot use: it gets an environment of its own.
CFFCONVERT := $(VENV)/cffconvert/bin/cffconvert
# JupyterLab opens .md files (the chapters are MyST notebooks) with jupytext's notebook view.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
CHROMIUM := /usr/bin/chromium

.PHONY: install test check book bench clean browser lab

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[book,test,pretrained,lab,pdf]"
	touch $(STAMP)

# The book's local MathJax (npm registry, pinned and checked; git-ignored), so it reads offline.
$(MATHJAX): collapse/book/mathjax.py | $(STAMP)
	@if ! command -v npm >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing npm (apt-get) to fetch MathJax"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; \
	fi
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

# Two workers, a test module on one of them: one builds the fast book first while the other
# runs the rest, then both run the tests that read it (tests/conftest.py orders them); the 25
# slowest tests are listed at the end.
test: install browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadscope --durations=25

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

clean:
	rm -rf _build book/executed
