# attnrec: `make demo` trains SASRec on the built-in demo data; `make test` runs the checks.
# Both create .venv and install the package (editable, with the dev extras) the first time, and
# again only when pyproject.toml or constraints.txt changes.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.attnrec-installed
RUN    ?= runs/demo

.PHONY: demo test install lint typecheck layers docs dist clean

demo: $(STAMP)
	$(BIN)/attnrec train --data demo --model sasrec --preset demo --out $(RUN)
	$(BIN)/attnrec recommend --model $(RUN) --user 1 -k 5
	$(BIN)/attnrec recommend --model $(RUN) --history "428,421,398,no-such-item" -k 5

test: $(STAMP) lint typecheck layers docs
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff format --check $(wildcard src tests benchmarks) docs/*.py
	$(BIN)/ruff check $(wildcard src tests benchmarks) docs/*.py

typecheck: $(STAMP)
	$(BIN)/mypy

# the one-way layer contract of src/attnrec (pyproject.toml, [tool.importlinter])
layers: $(STAMP)
	$(BIN)/lint-imports

# the documentation site (mkdocs.yml): --strict turns every warning (a broken link, an API reference to
# an object that no longer exists, a generated model page out of date) into a failure
docs: $(STAMP)
	$(BIN)/python docs/gen_pages.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# the release artefacts: sdist and wheel in dist/, checked by twine (docs/how-to/release.md)
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --sdist --wheel --outdir dist .
	$(BIN)/twine check --strict dist/*

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

clean:
	rm -rf $(RUN) .pytest_cache .mypy_cache .ruff_cache site dist
