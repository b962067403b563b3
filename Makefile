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
	DJANGO_DEBUG=true $(BIN)/python manage.py embeddings_prepare
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
	$(BIN)/python -m bench $(BENCH_ARGS)  # its part "import" runs bench/import_memory.py

bench-big: install
	$(BIN)/python -m bench --big $(BENCH_ARGS)

# Instructions per request under valgrind's callgrind (deterministic; bench/instructions.py).
.PHONY: bench-instructions
bench-instructions: install
	$(BIN)/python -m bench.instructions $(BENCH_ARGS)

# Evidence recall of search and context on LoCoMo (../shared/data/locomo-dev/), through the API.
.PHONY: bench-recall
bench-recall: install
	$(BIN)/python -m bench.recall $(BENCH_ARGS)

# --- Containers (README: Run with containers) ---------------------------------------------------
# One image for every role. podman by default (CONTAINER=docker works too), with the settings in
# deploy/podman/containers.conf unless CONTAINERS_CONF names another file. BASE_IMAGE: the
# official python:3.11-slim-bookworm; where no registry is reachable, `make base-image` builds one
# from Debian packages: `make image BASE_IMAGE=localhost/memoryhub-base:bookworm`.
CONTAINER  ?= podman
IMAGE      ?= localhost/memoryhub:latest
BASE_IMAGE ?= python:3.11-slim-bookworm
export CONTAINERS_CONF ?= $(CURDIR)/deploy/podman/containers.conf

.PHONY: base-image wheelhouse image licenses scaleout-test
base-image:
	deploy/podman/base-image.sh localhost/memoryhub-base:bookworm

# Every dependency as a wheel in build/wheelhouse, resolved inside BASE_IMAGE; the image installs
# from it alone (pip --no-index).
wheelhouse:
	CONTAINER=$(CONTAINER) BASE_IMAGE=$(BASE_IMAGE) deploy/wheelhouse.sh

# podman writes OCI images unless told otherwise, and OCI has no HEALTHCHECK: Docker's format.
image: wheelhouse
	$(CONTAINER) build $(if $(filter podman,$(CONTAINER)),--format docker) \
	  --build-arg BASE_IMAGE=$(BASE_IMAGE) -t $(IMAGE) .

# THIRD_PARTY_LICENSES.md: the list the image makes of what it carries, at build time.
licenses:
	$(CONTAINER) run --rm $(IMAGE) licenses > THIRD_PARTY_LICENSES.md

# Builds the base and the image, then two web containers, a worker and two beats on the
# machine's PostgreSQL and Redis (scripts/scaleout_test.sh says what it checks).
scaleout-test:
	scripts/scaleout_test.sh

clean:
	rm -rf $(VENV) .celery .cache staticfiles db.sqlite3* .test-db.sqlite3*
