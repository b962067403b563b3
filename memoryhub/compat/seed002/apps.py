from django.apps import AppConfig


class Seed002Config(AppConfig):
    name = "memoryhub.compat.seed002"
    label = "compat_seed002"
    verbose_name = "Seed 002 compatibility"
