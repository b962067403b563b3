"""Person-bound credentials: a tenant's token-signing key and the tokens minted with it."""

from __future__ import annotations

from django.db import models

from memoryhub.accounts.models import EndUser, TenantOwnedModel


class SigningKey(TenantOwnedModel):
    """A tenant's HS256 signing key, one row per tenant.

    Only a random salt is stored: the secret is HMAC(SECRET_KEY, salt), so a copy of the
    database alone cannot forge a token. Rotating moves the salt to `previous_salt`, valid
    until `previous_valid_until` (a grace period chosen at rotation; none by default)."""

    version = models.PositiveIntegerField(default=1)
    salt = models.CharField(max_length=64)
    previous_salt = models.CharField(max_length=64, blank=True, default="")
    previous_valid_until = models.DateTimeField(null=True, blank=True)
    rotated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant"], name="signingkey_one_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_id} v{self.version}"


class PersonToken(TenantOwnedModel):
    """A minted token, by its id (`jti`; never the token itself): what the UI lists, what a
    revocation marks, and what verification looks up. Erasing the person takes their tokens.
    Rows outlive their expiry by a day at most (pruned when the tenant mints again)."""

    jti = models.CharField(max_length=64, unique=True)
    end_user = models.ForeignKey(EndUser, on_delete=models.CASCADE, related_name="person_tokens")
    session_id = models.UUIDField(null=True, blank=True)
    agent_id = models.CharField(max_length=128, blank=True, default="")
    scopes = models.JSONField(default=list)
    minted_by = models.CharField(max_length=200, help_text="The actor that minted it.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "end_user", "-expires_at"], name="persontoken_person"),
            models.Index(fields=["tenant", "expires_at"], name="persontoken_expiry"),
        ]

    def __str__(self) -> str:
        return f"token {self.jti} for {self.end_user_id}"
