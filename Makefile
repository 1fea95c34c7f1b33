# The two commands of README.md. Both create .venv and install what they need when it is missing or stale:
# `serve` the runtime requirements, `test` (and `lint`) the development ones as well.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
RUNTIME := $(VENV)/.runtime-installed
DEV := $(VENV)/.dev-installed

.PHONY: serve test test-fast lint venv

venv: $(DEV)

$(RUNTIME): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt
	touch $(RUNTIME)

$(DEV): requirements.txt requirements-agno.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements-dev.txt
	touch $(RUNTIME) $(DEV)

# Web (ASGI) + worker + sweeper on ${AGENTOS_HOST:-127.0.0.1}:${AGENTOS_PORT:-7777}, honouring DATABASE_URL and
# REDIS_URL; embedded PostgreSQL and Redis when they are not set. Ctrl-C stops everything.
serve: $(RUNTIME)
	$(PY) manage.py serve

# The whole test suite against real PostgreSQL, Redis and worker processes (embedded ones when DATABASE_URL /
# REDIS_URL are not set).
test: $(DEV)
	$(PY) -m pytest

# The tests that start no process of ours and no browser (not marked slow): a few minutes, for a change in the
# making; `make test` before it lands.
test-fast: $(DEV)
	$(PY) -m pytest -m "not slow"

lint: $(DEV)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
