from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "memoryhub.accounts"
    label = "accounts"
    verbose_name = "Accounts and tenancy"

    def ready(self) -> None:
        from memoryhub.accounts import schema  # noqa: F401  (registers the OpenAPI auth scheme)
