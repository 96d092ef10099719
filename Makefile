# The two commands of the README:  make demo  and  make test.
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: bootstrap demo test test-fast bench clean

bootstrap:
	@bash scripts/bootstrap.sh

demo: bootstrap
	@$(PY) -m elflayout demo

test: bootstrap
	@$(PY) -m pytest -ra $(PYTEST_ARGS)

# Unit tests only (no downloads of real targets).
test-fast: bootstrap
	@$(PY) -m pytest -ra -m "not slow" $(PYTEST_ARGS)

bench: bootstrap
	@$(PY) bench/run_all.py

clean:
	rm -rf build .pytest_cache
