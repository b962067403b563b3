from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "memoryhub.retention"
    label = "retention"
    verbose_name = "Retention and purge"
