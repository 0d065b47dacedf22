"""``manage.py watch_work``: the warden. Every ``WORK_WATCH_INTERVAL_S`` it fails running work whose worker went
silent and re-sends queued work whose message the broker lost (``work.liveness.watch_work``).

It runs as a process of its own, apart from the Celery workers it watches, so a job whose worker was killed is
failed even if no worker ever comes back. Rounds are idempotent (every update is conditional on the status), so
a second warden does no harm. ``--once`` runs a single round (for cron, or a test).
"""

import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection

from adaptis_web.studio.work.liveness import watch_work


class Command(BaseCommand):
    help = "Fail running work whose worker died and re-queue queued work whose message was lost, every interval."

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="run one round and exit")
        parser.add_argument("--interval", type=float, default=None,
                            help="seconds between rounds (default: settings.WORK_WATCH_INTERVAL_S)")

    def handle(self, *args, once: bool = False, interval: float | None = None, **options):
        interval = settings.WORK_WATCH_INTERVAL_S if interval is None else interval
        if interval <= 0:
            self.stderr.write("--interval must be > 0")
            raise SystemExit(2)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.stdout.write(f"warden: every {interval:g} s, running work silent for {settings.WORK_STALE_AFTER_S} s "
                          f"is failed; queued work lost for {settings.WORK_QUEUED_GRACE_S} s is re-sent", ending="\n")
        self.stdout.flush()
        while True:
            report = watch_work()
            if any(report.values()):
                self.stdout.write(f"warden: {report}")
                self.stdout.flush()
            connection.close()  # no connection held between rounds (a restarted database is fine)
            if once or stop.wait(interval):
                return
