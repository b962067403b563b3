import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

application = get_wsgi_application()

# The URLconf's views and the token encoding, before the first request (memoryhub.core.warm):
# not inside it, holding up its client for seconds.
from memoryhub.core.warm import web_process_warm  # noqa: E402

web_process_warm()

# openai (0.4 s to import) is loaded by the first LLM or embeddings client, so that commands and
# the admin do not pay for it; the web process loads it at start, not in the first request
# that makes a client.
import openai  # noqa: E402, F401
