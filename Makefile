# Two entry points: `make demo` (install + the main job) and `make test` (install + every test).
# Both create or reuse .venv at the repository root; torch comes from the CPU wheel on disk.
VENV ?= .venv
PY := $(VENV)/bin/python
SPECTUNE := $(VENV)/bin/spectune
STAMP := $(VENV)/.installed
export OMP_NUM_THREADS ?= 2

.PHONY: install test demo lint clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check engine policies tuner storage tests benchmarks

# Everything the tests need is installed or started here, so a developer's `make test` is exactly CI's:
# the SmolLM2 weights, a llama-server build (cached per version), and a loopback PostgreSQL server.
test: install
	$(SPECTUNE) models fetch smollm2-135m
	$(SPECTUNE) engines install llama.cpp
	pg_url="$$(bash scripts/postgres.sh start)" && test -n "$$pg_url" && \
	  SPECTUNE_TEST_PG_URL="$$pg_url" $(PY) -m pytest -q

# `make demo`: qwen2.5-coder-1.5b + 0.5B draft, ~15 min on 2 cores; `make demo DEMO=quick`: SmolLM2-135M, a few
# minutes. Report, plots, traces, logs and the SQLite database go to $(DEMO_OUT).
DEMO ?= full
DEMO_OUT ?= demo-out
DEMO_MODELS := $(if $(filter quick,$(DEMO)),smollm2-135m,qwen2.5-coder-1.5b qwen2.5-coder-0.5b)
DEMO_FLAGS := $(if $(filter quick,$(DEMO)),--quick,)
$(if $(filter-out quick full,$(DEMO)),$(error DEMO=$(DEMO): use DEMO=quick or leave it unset))

demo: install
	$(SPECTUNE) models fetch $(DEMO_MODELS)
	$(SPECTUNE) demo $(DEMO_FLAGS) --out $(DEMO_OUT)

clean-venv:
	rm -rf $(VENV)
