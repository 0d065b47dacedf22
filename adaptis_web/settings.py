"""Django settings, read from the environment through typed helpers that fail loudly.

Development needs no variables at all (DEBUG defaults to on, SQLite file in var/, Redis on localhost).
Production sets DEBUG=false, which makes SECRET_KEY and ALLOWED_HOSTS mandatory.

Variables: DEBUG, SECRET_KEY, ALLOWED_HOSTS, CSRF_TRUSTED_ORIGINS, SECURE_COOKIES, SECURE_SSL_REDIRECT,
SECURE_HSTS_SECONDS, SECURE_HSTS_INCLUDE_SUBDOMAINS, SECURE_HSTS_PRELOAD, TRUST_X_FORWARDED_PROTO, DATABASE_URL,
DB_CONN_MAX_AGE, DB_PREPARED_STATEMENTS, REDIS_URL, CELERY_QUEUE, CELERY_RUNS_QUEUE, LIVE_EVENTS_PREFIX,
CPU_RUN_MAX_RANKS, CPU_RUN_MAX_PARAMS, RUN_TIMEOUT_S, WORK_HEARTBEAT_S, WORK_STALE_AFTER_S, WORK_WATCH_INTERVAL_S, WORK_QUEUED_GRACE_S,
WORK_TASK_TIME_LIMIT_S, LOG_LEVEL, ADAPTIS_SEED_DEMO, API_TOKEN_MAX_DAYS, LOGIN_FAILURE_LIMIT,
LOGIN_COOLOFF_MINUTES, PASSWORD_HASHERS, THROTTLE_TOKEN_FAILURES, THROTTLE_TOKEN_CREATE, THROTTLE_SPECS, THROTTLE_JOBS, THROTTLE_RUNS, THROTTLE_INGEST, CLUSTER_RUN_START_TIMEOUT_S.
"""

from datetime import timedelta
from pathlib import Path

import dj_database_url

from adaptis_web.env import env_bool, env_int, env_list, env_str
from adaptis_web.processes import planning_queue, runs_queue

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", True)
SECRET_KEY = env_str("SECRET_KEY", "dev-only-insecure-key-adaptis-studio") if DEBUG else env_str("SECRET_KEY")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"]) if DEBUG else env_list(
    "ALLOWED_HOSTS", [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# HTTPS hardening is the default in production (DEBUG off): cookies only over HTTPS, plain HTTP redirected, HSTS for
# a year (`manage.py check --deploy` finds nothing). An instance served on plain HTTP on purpose (a trial on
# localhost, a cluster-internal port) turns each off by name. Behind a proxy that terminates TLS, set
# TRUST_X_FORWARDED_PROTO=true so Django sees the request was HTTPS (and does not redirect it forever); only
# where that proxy is the only way in, since a client could otherwise claim HTTPS itself.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # the load balancer's and compose's health checks speak plain HTTP
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 365 * 24 * 3600, minimum=0)
# Whether HSTS covers every subdomain, or the domain asks for the browsers' preload list, is the domain owner's
# decision, not this app's: off unless set (`check --deploy` reminds of both).
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
if env_bool("TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# `manage.py seed_demo` creates a well-known login (demo / demo-pass-2026): only on a development instance, or
# where ADAPTIS_SEED_DEMO=1 asks for it; never on a production one by default.
SEED_DEMO = DEBUG or env_bool("ADAPTIS_SEED_DEMO", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "django_filters",
    "drf_spectacular",
    "axes",
    "adaptis_web.studio",
]

MIDDLEWARE = [
    "adaptis_web.request_errors.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: it answers a locked-out login with 429
]

# django-axes counts failed logins by username and address and locks that pair out for a while.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
# Django's hashers, strongest first (its default list). The first hashes new passwords; the others verify old ones. The
# test suite puts a fast one first for the many users it creates, and passes the same list to the web server it
# starts.
PASSWORD_HASHERS = env_list("PASSWORD_HASHERS", ["django.contrib.auth.hashers.PBKDF2PasswordHasher",
                                                 "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
                                                 "django.contrib.auth.hashers.Argon2PasswordHasher",
                                                 "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
                                                 "django.contrib.auth.hashers.ScryptPasswordHasher"])
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

ROOT_URLCONF = "adaptis_web.urls"
WSGI_APPLICATION = "adaptis_web.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "adaptis_web.studio.context_processors.teams",
            ],
        },
    },
]

DEFAULT_SQLITE_PATH = BASE_DIR / "var" / "db.sqlite3"
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{DEFAULT_SQLITE_PATH}"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    ),
}
# PostgreSQL: parameters bound by the server, and a query a connection has run 5 times prepared, so PostgreSQL
# parses and plans the API's many-join queries once per connection instead of on every request (the web server
# and PostgreSQL share the cores). Behind a pooler in transaction mode (PgBouncer), which cannot keep a prepared
# statement with its connection, set DB_PREPARED_STATEMENTS=false.
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool("DB_PREPARED_STATEMENTS", True):
    DATABASES["default"]["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web process, the Celery worker and its live-event relay thread write concurrently: WAL lets
    # readers proceed during a write, IMMEDIATE transactions and a busy timeout queue writers instead of
    # failing with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Request bodies (JSON, form fields) are refused past 8 MiB before they are read (README, "Bounds on input"); an
# uploaded file is refused by its size (studio.catalog.specs.read_upload).
DATA_UPLOAD_MAX_MEMORY_SIZE = 8 * 1024 * 1024

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "studio:dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed names need `collectstatic`; development and tests serve the source files directly.
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage" if DEBUG
                    else "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG  # development: pick up edited static files without collectstatic

# Redis is the Celery broker and result backend and carries live run events; never the only copy.
REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_TASK_DEFAULT_QUEUE = planning_queue()
# Runs (torch ranks on the worker's host, minutes of CPU) get their own queue, so planning jobs never wait
# behind them: one worker per queue, `planner` and `runner` (adaptis_web/processes.py).
CELERY_RUNS_QUEUE = runs_queue()
# Profiles are measured where the runs happen (runs.profiling): on the runs queue too.
CELERY_TASK_ROUTES = {"studio.run_execute": {"queue": CELERY_RUNS_QUEUE},
                      "studio.profile_measure": {"queue": CELERY_RUNS_QUEUE}}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_EXPIRES = 24 * 3600
CELERY_TASK_IGNORE_RESULT = True  # tasks record their outcome on our rows; nobody waits on a result
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
LIVE_EVENTS_PREFIX = env_str("LIVE_EVENTS_PREFIX", "adaptis")

# Liveness of work: the worker stamps heartbeat_at every WORK_HEARTBEAT_S; the warden (`manage.py watch_work`, a
# process apart from the workers) every WORK_WATCH_INTERVAL_S fails running jobs and runs silent for
# WORK_STALE_AFTER_S (their worker died: OOM kill, lost host, SIGKILL), and re-sends the task of rows queued for
# WORK_QUEUED_GRACE_S whose message the broker no longer holds (Redis restarted, a worker died holding it).
WORK_HEARTBEAT_S = env_int("WORK_HEARTBEAT_S", 10, minimum=1)
WORK_STALE_AFTER_S = env_int("WORK_STALE_AFTER_S", max(120, 3 * WORK_HEARTBEAT_S), minimum=3 * WORK_HEARTBEAT_S)
WORK_WATCH_INTERVAL_S = env_int("WORK_WATCH_INTERVAL_S", max(5, WORK_STALE_AFTER_S // 4), minimum=1)
WORK_QUEUED_GRACE_S = env_int("WORK_QUEUED_GRACE_S", 30, minimum=1)
# A cluster run waits for its user to launch it (a Slurm queue may hold it for a while): failed when none of its ranks
# reported within this long (runs.cluster_runs).
CLUSTER_RUN_START_TIMEOUT_S = env_int("CLUSTER_RUN_START_TIMEOUT_S", 3600, minimum=60)

# Limits of "Run on CPU": gloo ranks on the worker's host.
# 8 ranks: a hybrid plan's every GPU is a rank, and a TP2 x PP2 x DP2 plan (three axes at their smallest) must
# rehearse on a workstation. More ranks than cores share them, slower but not stuck: tiny-llama's one
# TP2 x PP2 x DP2 step takes about 15 s on a 2-core host, the ranks' start (importing torch) included.
CPU_RUN_MAX_RANKS = env_int("CPU_RUN_MAX_RANKS", 8, minimum=1)
CPU_RUN_MAX_PARAMS = env_int("CPU_RUN_MAX_PARAMS", 50_000_000, minimum=1)
RUN_TIMEOUT_S = env_int("RUN_TIMEOUT_S", 600, minimum=10)

# Delivery, on purpose (README, "Work never stuck"):
# - acks_late: a message leaves Redis only when its task has ended, so a worker killed mid-task cannot take the
#   message with it; the task claims its row only while the row is queued, so a message delivered twice is
#   harmless.
# - reject_on_worker_lost off: a task whose pool process died (the OOM killer on a huge plan) is not re-queued;
#   it would kill the next worker too. Its row goes silent and the warden fails it as "worker lost".
# - prefetch 1: a worker holds only the message it runs, never one it has not started (which its death
#   would strand).
# - time limits: a task past CELERY_TASK_SOFT_TIME_LIMIT gets an exception its service records on the row; past
#   the hard limit its pool process is killed. Both lie beyond the longest legitimate task (a run's
#   RUN_TIMEOUT_S, a search's 600 s budget plus its profile).
# - visibility_timeout beyond the hard limit: Redis hands an unacknowledged message to another worker only
#   when no task could still be running it.
WORK_TASK_TIME_LIMIT_S = env_int("WORK_TASK_TIME_LIMIT_S", max(RUN_TIMEOUT_S, 600) + 300, minimum=60)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = WORK_TASK_TIME_LIMIT_S
CELERY_TASK_SOFT_TIME_LIMIT = WORK_TASK_TIME_LIMIT_S - 30
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": WORK_TASK_TIME_LIMIT_S + 300}

# Throttling counts in this cache: Redis, so every web process shares the counts.
CACHES = {"default": {"BACKEND": "adaptis_web.cache.RedisCache", "LOCATION": REDIS_URL,
                      "KEY_PREFIX": f"{LIVE_EVENTS_PREFIX}-cache"}}

# API tokens: django-rest-knox keeps a digest and an expiry; our model adds a name and the last use.
KNOX_TOKEN_MODEL = "studio.ApiToken"
# knox's own migrations create its token table even when KNOX_TOKEN_MODEL replaces it; a table no model owns
# (referencing auth_user) is one nothing clears or migrates, so knox runs without them.
MIGRATION_MODULES = {"knox": None}
API_TOKEN_MAX_DAYS = env_int("API_TOKEN_MAX_DAYS", 365, minimum=1)
REST_KNOX = {"TOKEN_MODEL": KNOX_TOKEN_MODEL}  # each token's expiry is chosen when it is created

REST_FRAMEWORK = {
    # Token first: an unauthenticated API call then gets 401 with a WWW-Authenticate challenge, not 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "adaptis_web.studio.api.auth.NamedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_THROTTLE_RATES": {
        "token_failures": env_str("THROTTLE_TOKEN_FAILURES", "20/hour"),
        "token_create": env_str("THROTTLE_TOKEN_CREATE", "20/hour"),
        # Creating work, per user (api.throttles): each spec is parsed and validated, each job searches for up
        # to its budget on a planning worker, each run holds the runner's cores for minutes.
        "specs": env_str("THROTTLE_SPECS", "300/hour"),
        "jobs": env_str("THROTTLE_JOBS", "120/hour"),
        "runs": env_str("THROTTLE_RUNS", "30/hour"),
        # Per cluster run, its ranks together: a batch per rank about every FLUSH_INTERVAL_S at most, far fewer in
        # practice (executor.running.events batches whatever accumulated).
        "ingest": env_str("THROTTLE_INGEST", "6000/minute"),
    },
    # DRF's JSON (and, for a browser, its browsable API), which also sends text already encoded: api.renderers.
    "DEFAULT_RENDERER_CLASSES": ["adaptis_web.studio.api.renderers.JSONRenderer",
                                 "rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "adaptis_web.studio.api.pagination.StrictLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "adaptis_web.studio.api.errors.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "adaptis_web.studio.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "adaptis_web.studio.api.parsers.StrictMultiPartParser",
    ],
}
SWAGGER_UI_DIST_VERSION = "5.35.0"
SPECTACULAR_SETTINGS = {
    "TITLE": "AdaPtis Studio API",
    "DESCRIPTION": "Teams, model specs, planning jobs, pipeline plans and executor runs. Errors are "
                   '`{"errors": [{"field": ..., "reason": ...}]}` with HTTP 400; what your role in the team may '
                   'not do answers 403 in the same shape (field "role"); objects of teams you do not belong to '
                   "answer 404. Authenticate with `Authorization: Token <token>` (API tokens page).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": f"{STATIC_URL}vendor/swagger-ui-dist-{SWAGGER_UI_DIST_VERSION}",
    "SWAGGER_UI_FAVICON_HREF": f"{STATIC_URL}vendor/swagger-ui-dist-{SWAGGER_UI_DIST_VERSION}/favicon-32x32.png",
    "COMPONENT_SPLIT_REQUEST": True,
    "COMPONENT_SPLIT_PATCH": False,
    "ENUM_NAME_OVERRIDES": {"GrantableRoleEnum": ["admin", "member", "viewer"],
                            "MembershipRoleEnum": "adaptis_web.studio.models.Membership.Role"},  # a PATCH body requires what its serializer requires (a rename needs a name)
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums",
                             "adaptis_web.studio.api.schema.document_errors",
                             "adaptis_web.studio.api.schema.document_blank_texts",
                             "adaptis_web.studio.api.schema.document_request_rules",
                             "adaptis_web.studio.api.schema_links.document_links"],
}

# Unhandled exceptions reach the logger django.request with their traceback; Django's default configuration
# prints it only with DEBUG on, so production would log nothing. Every line carries the request's id.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "adaptis_web.request_errors.RequestIdFilter"}},
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s [request %(request_id)s] %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["request_id"]}},
    "loggers": {
        "adaptis_web": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}
