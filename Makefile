# The two commands of README.md. Both create .venv and install requirements.txt when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

.PHONY: serve test lint venv

venv: $(INSTALLED)

$(INSTALLED): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $(INSTALLED)

# Web (ASGI) + worker + sweeper on ${AGENTOS_HOST:-127.0.0.1}:${AGENTOS_PORT:-7777}, honouring DATABASE_URL and
# REDIS_URL; embedded PostgreSQL and Redis when they are not set. Ctrl-C stops everything.
serve: $(INSTALLED)
	$(PY) manage.py serve

# The whole test suite against real PostgreSQL, Redis and worker processes.
test: $(INSTALLED)
	$(PY) -m pytest

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
