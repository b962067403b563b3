from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "memoryhub.metrics"
    label = "metrics"
    verbose_name = "Metrics"

    def ready(self) -> None:
        from memoryhub.metrics.signals import connect_celery_signals

        connect_celery_signals()
