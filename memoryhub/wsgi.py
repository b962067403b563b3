import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")

application = get_wsgi_application()

# The URLconf's views, the token encoding and openai, before the first request
# (memoryhub.core.warm): not inside it, holding up its client for seconds.
from memoryhub.core.warm import web_process_warm  # noqa: E402

web_process_warm()
