import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_env_example_lists_every_variable_settings_reads():
    settings_source = (ROOT / "memoryhub" / "settings.py").read_text()
    read = set(re.findall(r'env(?:\.\w+)?\(\s*"([A-Z0-9_]+)"', settings_source))
    listed = set(re.findall(r"^#?\s*([A-Z0-9_]+)=", (ROOT / ".env.example").read_text(), re.M))

    assert read, "the pattern found no variables: update this test"
    assert read - listed == set()


def test_production_refuses_to_start_without_a_secret_key():
    env = {"PATH": "/usr/bin:/bin", "DJANGO_DEBUG": "false", "DJANGO_SECRET_KEY": ""}
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "memoryhub.settings"},
        capture_output=True,
        text=True,
        check=False,
    )

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_the_cache_takes_the_redis_database_beside_the_brokers():
    from memoryhub.settings import _next_redis_database

    assert _next_redis_database("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/1"
    assert _next_redis_database("redis://127.0.0.1:6379") == "redis://127.0.0.1:6379/1"
    # Redis has databases 0-15: beside the last one is the one before it.
    assert _next_redis_database("redis://127.0.0.1:6379/15") == "redis://127.0.0.1:6379/14"


def _settings_in_a_process(**env: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.RECALL_INDEX_MAX_MESSAGES, settings.RECALL_HISTORY_WINDOW_MESSAGES)"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "DJANGO_DEBUG": "true",
            "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
            **env,
        },
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_history_window_follows_a_lowered_index_bound():
    assert _settings_in_a_process().stdout.split() == ["200000", "50000"]
    lowered = _settings_in_a_process(RECALL_INDEX_MAX_MESSAGES="10000")
    assert lowered.stdout.split() == ["10000", "10000"], lowered.stderr


def test_a_history_window_over_the_index_bound_is_refused():
    result = _settings_in_a_process(
        RECALL_INDEX_MAX_MESSAGES="10000", RECALL_HISTORY_WINDOW_MESSAGES="20000"
    )

    assert result.returncode != 0
    assert "RECALL_HISTORY_WINDOW_MESSAGES must be at least 1" in result.stderr


def test_a_negative_pgvector_threshold_is_refused():
    result = _settings_in_a_process(RECALL_PGVECTOR_FROM_MESSAGES="-1")

    assert result.returncode != 0
    assert "RECALL_PGVECTOR_FROM_MESSAGES must be at least 0" in result.stderr
    assert _settings_in_a_process(RECALL_PGVECTOR_FROM_MESSAGES="0").returncode == 0
