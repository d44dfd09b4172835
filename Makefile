# Every target creates its own virtual environment and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-embedded

.PHONY: test chaos lint typecheck bench demo notebooks clean

# $(VENV)/.installed-EXTRA: the package and its EXTRA installed; redone when pyproject changes.
$(VENV)/.installed-%: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$*]'
	touch $@

test: $(STAMP)
	$(PY) -m ruff check langgraph_durable tests benchmarks
	$(PY) -m mypy
	$(PY) -m pytest -q

# The simulation soak: SEEDS seeded interleavings with faults per write mode (`make test`
# runs the default 1000 per mode). A failure prints the command that replays its seed.
SEEDS ?= 20000
chaos: $(STAMP)
	LGD_SIM_SEEDS=$(SEEDS) $(PY) -m pytest -q --timeout=0 tests/test_simulation.py

lint: $(STAMP)
	$(PY) -m ruff check langgraph_durable tests benchmarks
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) -m benchmarks.run

# Re-execute the notebooks against the LGD_* servers (else the local ones) and store their
# outputs, machine paths and host names replaced by placeholders.
notebooks: $(STAMP)
	$(PY) -m tests.notebook_runner

demo: $(DEMO_STAMP)
	$(VENV)/bin/langgraph-durable demo

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
