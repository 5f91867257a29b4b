"""Celery tasks (thin adapters over engine entry points). Filled in by the jobs API work."""
