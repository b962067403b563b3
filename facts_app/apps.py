from django.apps import AppConfig


class FactsAppConfig(AppConfig):
    name = "facts_app"
    verbose_name = "Long-term memory"
