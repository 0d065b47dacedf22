# One image for the web server and the Celery worker.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DEBUG=false

WORKDIR /app
# PIP_EXTRA_INDEX_URL may point pip at PyTorch's CPU wheel index for a smaller worker image.
ARG PIP_EXTRA_INDEX_URL=""
COPY pyproject.toml README.md ./
COPY planner ./planner
COPY executor ./executor
COPY adaptis_web ./adaptis_web
RUN pip install -e .
COPY . .
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput

RUN useradd --create-home adaptis && mkdir -p /app/var && chown -R adaptis /app/var
USER adaptis
EXPOSE 8000
CMD ["gunicorn", "adaptis_web.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4"]
