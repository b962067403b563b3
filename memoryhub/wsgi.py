import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

application = get_wsgi_application()

# The LLM client, and the openai package it imports (0.4 s, loaded on demand so that commands and
# the admin do not pay for it), before the first request that asks for it rather than in it.
from memoryhub.llm.client import get_llm_client  # noqa: E402

get_llm_client()
