from django.apps import AppConfig


class SearchConfig(AppConfig):
    name = "memoryhub.search"
    label = "search"
    verbose_name = "Search"
