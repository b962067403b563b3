from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "memoryhub.accounts"
    label = "accounts"
    verbose_name = "Accounts and tenancy"

    def ready(self) -> None:
        from memoryhub.accounts import (  # noqa: F401  (registration by import)
            checks,  # memoryhub.E010: every tenant-owned table has an index led by tenant
            schema,  # the OpenAPI auth scheme
            signals,  # memory-policy cache invalidation
        )
