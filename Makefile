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

# Without the costly tests (setup.cfg markers): no root, valgrind, downloads or slow ones.
test-fast: bootstrap
	@$(PY) -m pytest -ra -m "$(FAST)" $(PYTEST_ARGS)

FAST := not slow and not download and not valgrind and not root

bench: bootstrap
	@$(PY) bench/run_all.py

clean:
	rm -rf build .pytest_cache
