#!/bin/sh
# The image's entrypoint: the first argument is the role (README: Run with containers).
#   web          gunicorn with gunicorn.conf.py (PORT, GUNICORN_WORKERS, GUNICORN_THREADS, ...)
#   worker       a Celery worker (CELERY_WORKER_CONCURRENCY: pool processes; default one per CPU)
#   beat         Celery beat: run exactly one per deployment (README says why)
#   migrate      manage.py migrate, then, when MEMORYHUB_BOOTSTRAP is true and no tenant exists
#                yet, a first tenant, admin and API key (bootstrap_demo), printed to the log
#   healthcheck  the image's HEALTHCHECK: web answers GET /healthz; other roles: the process runs
#   licenses     prints the third-party licences this image carries
#   anything else: a manage.py command (createsuperuser, create_tenant, export_memory, shell, ...)
set -eu
cd /app

role=${1:-web}
[ "$#" -gt 0 ] && shift

case "$role" in
  web)
    exec gunicorn -c gunicorn.conf.py memoryhub.wsgi "$@"
    ;;
  worker)
    exec celery -A memoryhub worker --loglevel="${LOG_LEVEL:-INFO}" \
      ${CELERY_WORKER_CONCURRENCY:+--concurrency="$CELERY_WORKER_CONCURRENCY"} "$@"
    ;;
  beat)
    # The schedule lives in the database (django-celery-beat); the pid file is per container.
    exec celery -A memoryhub beat --loglevel="${LOG_LEVEL:-INFO}" \
      --pidfile=/tmp/celerybeat.pid "$@"
    ;;
  migrate)
    python manage.py migrate --no-input "$@"
    case "${MEMORYHUB_BOOTSTRAP:-false}" in
      1|true|yes|on)
        # Only on a fresh database: bootstrap_demo revokes and reissues its key on every run,
        # which must not happen to a running deployment at each `compose up`.
        if python manage.py shell --no-imports -c \
          'import sys; from memoryhub.accounts.models import Tenant; sys.exit(1 if Tenant.objects.exists() else 0)'
        then
          python manage.py bootstrap_demo
        else
          echo "migrate: a tenant exists already; no first tenant made (MEMORYHUB_BOOTSTRAP)"
        fi
        ;;
    esac
    ;;
  healthcheck)
    # PID 1 is what the role exec'd: only a web container has an HTTP probe to ask.
    if tr '\0' ' ' </proc/1/cmdline | grep -q gunicorn; then
      exec python - <<'PY'
import os, sys, urllib.request
# The Host header must be one Django allows (DJANGO_ALLOWED_HOSTS' first plain name).
hosts = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "").split(",") if h.strip()]
host = next((h for h in hosts if h != "*" and not h.startswith(".")), "localhost")
request = urllib.request.Request(
    f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/healthz", headers={"Host": host}
)
try:
    with urllib.request.urlopen(request, timeout=4) as response:  # noqa: S310
        sys.exit(0 if response.status == 200 else 1)
except Exception as error:
    print(f"healthz: {error}", file=sys.stderr)
    sys.exit(1)
PY
    fi
    exit 0
    ;;
  licenses)
    exec cat /opt/memoryhub/THIRD_PARTY_LICENSES.md
    ;;
  *)
    exec python manage.py "$role" "$@"
    ;;
esac
