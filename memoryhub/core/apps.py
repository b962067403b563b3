from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "memoryhub.core"
    label = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from memoryhub.core import checks  # noqa: F401  (registers the system checks)
