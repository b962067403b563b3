"""The Celery application; configuration comes from Django settings (`CELERY_*`)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

app = Celery("memoryhub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _ensure_filesystem_broker_folders(sender: Celery, **_: object) -> None:
    # kombu's filesystem transport fails on first use if its folders are missing.
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if folder := options.get(key):
            os.makedirs(folder, exist_ok=True)
