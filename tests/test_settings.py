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
