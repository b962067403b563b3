"""Settings for scripts/scaleout_check.py's containers (mounted, never in the image): production
settings with Redis's visibility timeout cut from an hour to seconds, and kombu's sweep for
unacknowledged messages every second (by default every ~100 s), so that the message of a worker
killed mid-task comes back to the next worker within the check, not an hour later."""

from memoryhub.settings import *  # noqa: F403
from memoryhub.settings import CELERY_BROKER_TRANSPORT_OPTIONS

CELERY_BROKER_TRANSPORT_OPTIONS = {
    **CELERY_BROKER_TRANSPORT_OPTIONS,
    "visibility_timeout": 10,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}
