# Two entry points for a fresh machine (see README.md):
#   make book  - set up .venv, build the HTML book into _build/html
#   make test  - set up .venv, run ruff and every test
# torch is pinned to the CPU wheel in the install step; pyproject.toml keeps a range.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SHELL  := /bin/bash
.SHELLFLAGS := -eo pipefail -c

MATHJAX := book/_static/mathjax/VERSION
CHROMIUM := /usr/bin/chromium

.PHONY: install test book bench clean browser

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[book,test,pretrained]"
	touch $(STAMP)

# The book's local MathJax (npm registry, pinned and checked; git-ignored), so it reads offline.
$(MATHJAX): collapse/book/mathjax.py | $(STAMP)
	@if ! command -v npm >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing npm (apt-get) to fetch MathJax"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; \
	fi
	$(BIN)/python -m collapse.book.mathjax
	touch $@

install: $(STAMP) $(MATHJAX)

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

test: install browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

book: install
	$(BIN)/collapse book --profile book

bench: install
	$(BIN)/python benchmarks/san_throughput.py
	$(BIN)/python benchmarks/mtg_stable_rank.py
	$(BIN)/python benchmarks/mtg_gradients.py
	$(BIN)/python benchmarks/spectra.py
	$(BIN)/python benchmarks/chunked_resume.py
	$(BIN)/python benchmarks/notebook_times.py

clean:
	rm -rf _build book/executed
