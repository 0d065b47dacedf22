"""WSGI entry point: `gunicorn adaptis_web.wsgi`."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "adaptis_web.settings")

application = get_wsgi_application()
