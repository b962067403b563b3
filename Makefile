# MemoryHub: `make run` to try it, `make test` to test it. See README.md.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
# Reinstall only when the dependency list changes.
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml clients/python/pyproject.toml | cksum | cut -d' ' -f1)
PROD_ENV := DJANGO_DEBUG=false DJANGO_SECRET_KEY=lint-only-$(shell date +%s)-not-a-real-secret-but-long-enough-for-django

.PHONY: install run test lint format bench bench-big clean

$(STAMP): pyproject.toml clients/python/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet -e "clients/python[langchain,langgraph]"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

run: install
	DJANGO_DEBUG=true $(BIN)/python manage.py migrate --no-input
	DJANGO_DEBUG=true $(BIN)/python manage.py bootstrap_demo
	DJANGO_DEBUG=true $(BIN)/python manage.py seed_demo
	@echo "Serving on http://127.0.0.1:$(PORT)/ (API docs: /api/docs/, admin: /admin/). Ctrl-C stops web, worker and beat."
	DJANGO_DEBUG=true PORT=$(PORT) PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/honcho start -f Procfile.dev

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The Python SDK (clients/python/) alone; `make test` runs its tests too.
.PHONY: test-client
test-client: install
	$(BIN)/python -m pip install --quiet -e "clients/python[langchain,langgraph]"
	$(BIN)/python -m pytest clients/python/tests $(PYTEST_ARGS)

# The quick part: everything but the tests marked slow (real workers, browsers, fuzzing, long runs).
.PHONY: test-fast
test-fast: install
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(PROD_ENV) $(BIN)/mypy .
	$(PROD_ENV) $(BIN)/python manage.py makemigrations --check --dry-run
	$(PROD_ENV) $(BIN)/python manage.py check --deploy --fail-level WARNING

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python -m bench $(BENCH_ARGS)
	$(BIN)/python bench/import_memory.py

bench-big: install
	$(BIN)/python -m bench --big $(BENCH_ARGS)

# Evidence recall of search and context on LoCoMo (../shared/data/locomo-dev/), through the API.
.PHONY: bench-recall
bench-recall: install
	$(BIN)/python -m bench.recall $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .celery .cache staticfiles db.sqlite3* .test-db.sqlite3*
