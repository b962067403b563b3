import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

application = get_wsgi_application()

# openai (0.4 s to import) is loaded by the first LLM or embeddings client, so that commands and
# the admin do not pay for it; the web process loads it at start, not in the first request
# that makes a client.
import openai  # noqa: E402, F401
