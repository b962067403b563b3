from django.apps import AppConfig


class TransferConfig(AppConfig):
    name = "memoryhub.transfer"
    label = "transfer"
    verbose_name = "Import and export"
