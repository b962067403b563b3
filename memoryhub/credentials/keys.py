"""The signing secret of a tenant's key version: derived, never stored."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings

ALGORITHM = "HS256"


def signing_secret(*, salt: str) -> bytes:
    """HMAC(SECRET_KEY, salt): the database keeps only the salt, so a copy of it cannot sign.
    Changing SECRET_KEY therefore invalidates every person token (they are short-lived)."""
    key = str(settings.SECRET_KEY).encode()
    return hmac.new(key, f"memoryhub.person-token:{salt}".encode(), hashlib.sha256).digest()
