from django.apps import AppConfig


class CredentialsConfig(AppConfig):
    name = "memoryhub.credentials"
    label = "credentials"
    verbose_name = "Person-bound credentials"

    def ready(self) -> None:
        from memoryhub.accounts.authentication import token_verifier_register
        from memoryhub.credentials import scoping, selectors

        scoping.register()
        token_verifier_register(selectors.person_token_verify)
