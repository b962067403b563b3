"""The importers' tests read stores dated 2025: against the default 90-day retention every one
of them would ask for a retention choice first. That check has its own tests
(test_retention_on_import.py, which ask for `real_retention_windows`); the others see
retention windows that keep everything."""

from __future__ import annotations

import pytest

from memoryhub.transfer import retention


@pytest.fixture
def real_retention_windows() -> None:
    """Ask for this to see the tenant's real retention windows on import."""


@pytest.fixture(autouse=True)
def _retention_keeps_everything(request: pytest.FixtureRequest, monkeypatch) -> None:
    if "real_retention_windows" in request.fixturenames:
        return
    monkeypatch.setattr(retention, "_cutoffs", lambda *, tenant, now: ({"": None}, None))
