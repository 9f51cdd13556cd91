# Developer shortcuts; the README quick start is the reference for a fresh machine.
PY ?= .venv/bin/python

.PHONY: install test bench lint fit

install:
	python3 -m venv .venv && .venv/bin/pip install -q -e '.[test,dev]'

test:
	$(PY) -m pytest -q

bench:
	$(PY) -m pytest bench --benchmark-only -q

lint:
	$(PY) -m ruff check compaction tests bench scripts
	$(PY) -m mypy compaction

fit:
	$(PY) scripts/fit_estimator.py
