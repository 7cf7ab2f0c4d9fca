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

.PHONY: install test book bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[book,test,pretrained]"
	touch $(STAMP)

install: $(STAMP)

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

book: install
	$(BIN)/collapse book --profile book

bench: install
	$(BIN)/python benchmarks/san_throughput.py
	$(BIN)/python benchmarks/mtg_stable_rank.py
	$(BIN)/python benchmarks/mtg_gradients.py

clean:
	rm -rf _build book/executed
