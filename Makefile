# Every target creates its own virtual environment and installs what it needs.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-embedded
COMPAT_VENV ?= .venv-compat
COMPAT_PY := $(COMPAT_VENV)/bin/python
TOOLS_STAMP := $(VENV)/.installed-tools

.PHONY: test chaos compat lint typecheck bench demo notebooks clean

# $(VENV)/.installed-EXTRA: the package and its EXTRA installed, at the versions that
# compat/constraints.txt pins; redone when pyproject changes.
$(VENV)/.installed-%: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$*]' -c compat/constraints.txt
	touch $@

# System programs some tests start besides the servers: a PgBouncer (transaction mode).
# Installed with apt when missing, as root on Debian or Ubuntu; else the test that needs it
# fails saying how to install it. Done with the venv, so a later offline `make test` has it.
$(TOOLS_STAMP):
	@mkdir -p $(VENV)
	@command -v pgbouncer >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q pgbouncer >/dev/null 2>&1; }; }; } || \
	  echo "note: pgbouncer is not installed and could not be (apt-get install pgbouncer); its test will fail"
	@if command -v pgbouncer >/dev/null 2>&1; then touch $@; fi

$(STAMP): | $(TOOLS_STAMP)

# `lint` and `test` first check that `_tiers/sync.py` is what `scripts/unasync.py` generates.
test: $(STAMP)
	$(PY) scripts/unasync.py --check
	$(PY) -m ruff check langgraph_durable tests benchmarks compat scripts
	$(PY) -m mypy
	$(PY) -m mypy scripts
	$(PY) -m pytest -q

# The soaks. The simulation: SEEDS seeded interleavings with faults per write mode (`make
# test` runs the default 1000 per mode); a failure prints the command that replays its seed.
# Real-process chaos: KILLS SIGKILLed agent processes across both write modes, with Redis
# killed and restarted, Postgres cut, asyncio cancellations, forks and resolves from the
# command line (`make test` runs 12); RESUME_LOG gets one line per
# thread saying where it resumed and why. The real-process checker: CHECKER_SECONDS of
# worker processes under its nemesis in each write mode (`make test` runs 20 s in each);
# then DRAIN_ROUNDS rounds of kill, drain, FLUSHDB and a fresh read, written behind (`make
# test` runs 12).
SEEDS ?= 20000
KILLS ?= 200
CHAOS_SEED ?= 1
RESUME_LOG ?= chaos-resumes.log
CHECKER_SECONDS ?= 1800
DRAIN_ROUNDS ?= 500
chaos: $(STAMP)
	LGD_SIM_SEEDS=$(SEEDS) $(PY) -m pytest -q --timeout=0 tests/faults/test_simulation.py
	$(PY) -m tests.support.chaos --kills $(KILLS) --seed $(CHAOS_SEED) --log $(RESUME_LOG)
	$(PY) -m tests.support.checker --seconds $(CHECKER_SECONDS) --seed $(CHAOS_SEED) --mode both
	$(PY) -m tests.support.checker --drain-rounds $(DRAIN_ROUNDS) --seed $(CHAOS_SEED)

# LangGraph's own test suite (the sdist of the pinned langgraph) against DurableSaver,
# write-through then write-behind, then the Postgres store's tests against DurableStore
# (compat/store_run.py); fails when any has a failed or errored test.
# Summaries in .compat-cache/summary-MODE.json. It runs in a venv of its own holding the
# package with the `compat` extra and nothing else, as LangGraph's CI does: the suite's
# streaming tests compare metadata that lists the installed langchain packages, and the
# `dev` extra adds one (langchain, for create_agent).
$(COMPAT_VENV)/.installed: pyproject.toml compat/constraints.txt
	test -x $(COMPAT_PY) || $(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_PY) -m pip install -q --upgrade pip
	$(COMPAT_PY) -m pip install -q -e '.[compat]' -c compat/constraints.txt
	touch $@

compat: $(COMPAT_VENV)/.installed
	status=0; for mode in through behind; do \
	  $(COMPAT_PY) -m compat.run --mode $$mode || status=1; \
	done; $(COMPAT_PY) -m compat.store_run || status=1; exit $$status

lint: $(STAMP)
	$(PY) scripts/unasync.py --check
	$(PY) -m ruff check langgraph_durable tests benchmarks compat scripts
	$(PY) -m mypy
	$(PY) -m mypy scripts

bench: $(STAMP)
	$(PY) -m benchmarks.run

# Re-execute the notebooks against the LGD_* servers (else the local ones) and store their
# outputs, machine paths and host names replaced by placeholders.
notebooks: $(STAMP)
	$(PY) -m tests.support.notebook_runner

demo: $(DEMO_STAMP)
	$(VENV)/bin/langgraph-durable demo

clean:
	rm -rf $(VENV) $(COMPAT_VENV) .pytest_cache .mypy_cache
