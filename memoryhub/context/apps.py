from django.apps import AppConfig


class ContextConfig(AppConfig):
    name = "memoryhub.context"
    label = "context"
    verbose_name = "Context"
