"""Plain helpers of the browser tests: logging in, keeping screenshots (fixtures: conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS_DIR", "test-artifacts")) / "screenshots"
SKIP_REASON = (
    "browser tests skipped: Debian's chromium is not installed "
    "(run `sudo apt-get install -y chromium`, then `make test`; `.ci/run` installs it itself)"
)
PASSWORD = "pw-for-browser-tests"


def log_in(page: Any, *, username: str = "owner", password: str = PASSWORD) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
