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

demo: install
	$(SPECTUNE) models fetch smollm2-135m
	$(SPECTUNE) generate --target smollm2-135m --method ngram --k 4 --max-new-tokens 64 --chat --compare \
	  --prompt "Write a Python function that reverses a string, then explain it."

clean-venv:
	rm -rf $(VENV)
