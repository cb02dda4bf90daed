# The two set-up commands of the README (`make run`, `make test`) and a few helpers.
# Each target creates .venv and installs statebed into it first (again only when
# pyproject.toml changed), so a fresh clone needs python3 (3.11+), make and Java 17.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test check bench chaos-nightly clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)  ## the main job on the embedded default: local Spark, local checkpoint under runs/, then both verifiers
	$(BIN)/statebed run

test: check  ## lint, type-check, then the whole test suite (starts its own S3 server)
	$(BIN)/pytest -q

check: $(STAMP)  ## ruff (lint + format) and mypy --strict on the packages
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)  ## benchmarks (minutes; not part of the tests)
	$(BIN)/python benchmarks/run_all.py

chaos-nightly: $(STAMP)  ## the full chaos matrix (hours): every fault kind x 3 workloads x v1/v2/native x 12 seeds
	mkdir -p runs
	$(BIN)/statebed chaos matrix --full --json --out runs/nightly-$$(date -u +%Y%m%d-%H%M%S) > runs/nightly-latest.json

clean:
	rm -rf $(VENV) runs .pytest_cache
