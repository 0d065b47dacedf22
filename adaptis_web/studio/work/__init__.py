"""The work Celery does for the other domains: enqueueing tasks by name on commit (queueing), noticing work whose
worker died (liveness, broker) and cancelling (cancelling). The tasks themselves are ``studio.tasks``."""
