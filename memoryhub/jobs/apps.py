from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "memoryhub.jobs"
    label = "jobs"
    verbose_name = "Background jobs"

    def ready(self) -> None:
        from memoryhub.jobs.signals import connect_celery_signals

        connect_celery_signals()
