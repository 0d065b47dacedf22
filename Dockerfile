# One image for the web server and the Celery worker.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    DEBUG=false

WORKDIR /app
# The lock pins torch's CPU build (2.13.0+cpu): PIP_EXTRA_INDEX_URL must point pip at PyTorch's CPU wheel index
# where no local copy of that wheel is configured (PIP_FIND_LINKS).
ARG PIP_EXTRA_INDEX_URL=""
ARG PIP_FIND_LINKS=""
# Exactly what CI tested: every package from the lock, hashes checked, then the project without resolving more.
COPY requirements/run.txt requirements/run.txt
RUN pip install --require-hashes -r requirements/run.txt
COPY pyproject.toml README.md ./
COPY planner ./planner
COPY executor ./executor
COPY adaptis_web ./adaptis_web
RUN pip install --no-deps --no-build-isolation -e .
COPY . .
# The project's bytecode, as scripts/lib.sh's compile_project writes it: the processes never write it here
# (PYTHONDONTWRITEBYTECODE, and /app is not theirs), so each would compile the project from source at its start.
RUN python -m compileall -q adaptis_web planner executor manage.py
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput

RUN useradd --create-home adaptis && mkdir -p /app/var && chown -R adaptis /app/var
USER adaptis
ENV ADAPTIS_HOST=0.0.0.0 ADAPTIS_PORT=8000
EXPOSE 8000
# The web server as adaptis_web/processes.py defines it (gunicorn.conf.py: two workers per core, WEB_CONCURRENCY
# overrides); `exec planner`, `exec runner` or `exec warden` makes the same image a worker or the warden.
CMD ["python", "-m", "adaptis_web.processes", "exec", "web"]
