"""Celery workers. `workers.dispatch` is the only module the API imports; it pulls in no torch or ray."""
