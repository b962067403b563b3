from django.apps import AppConfig
from django.core.signals import request_finished, request_started


class CoreConfig(AppConfig):
    name = "memoryhub.core"
    label = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        from memoryhub.core import after_response, checks  # noqa: F401  (checks: registration)
        from memoryhub.core.observability import connect_celery_signals

        request_started.connect(after_response.request_started, dispatch_uid="after_response")
        request_finished.connect(after_response.request_finished, dispatch_uid="after_response")
        # Request ids into task messages, task series and the task's log context (every process
        # that enqueues or runs tasks loads this app).
        connect_celery_signals()
        # Row-level security: the connection baseline, migrations' scope and the policies.
        from memoryhub.core.rls import rls_signals_connect

        rls_signals_connect()
        # Prepared statements run with their generic plan (memoryhub.core.prepared).
        from django.db.backends.signals import connection_created

        from memoryhub.core.prepared import generic_plans_baseline

        connection_created.connect(generic_plans_baseline, dispatch_uid="memoryhub_generic_plans")
