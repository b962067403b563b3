from django.apps import AppConfig
from django.core.signals import request_finished, request_started


class CoreConfig(AppConfig):
    name = "memoryhub.core"
    label = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from memoryhub.core import after_response, checks  # noqa: F401  (checks: registration)

        request_started.connect(after_response.request_started, dispatch_uid="after_response")
        request_finished.connect(after_response.request_finished, dispatch_uid="after_response")
