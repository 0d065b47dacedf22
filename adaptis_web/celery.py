"""The Celery application: `celery -A adaptis_web worker`. Configuration comes from Django's settings
(the CELERY_* names), so the worker and the web process read the same environment."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "adaptis_web.settings")

app = Celery("adaptis_web")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
