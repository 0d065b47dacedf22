.PHONY: run test lock bench
run:            ## install everything and start Redis, a Celery worker and the web server
	./scripts/run.sh
test:           ## install test needs and run the whole suite
	./scripts/test.sh
lock:           ## re-resolve requirements/run.txt and test.txt from pyproject.toml, and installer.txt
	./scripts/lock.sh
bench:          ## run every benchmark (prints tables)
	for script in benchmarks/*.py; do [ $$script = benchmarks/shared_host.py ] || .venv/bin/python $$script || exit 1; done  # (shared_host.py: their helpers)
