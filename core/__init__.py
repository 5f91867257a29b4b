"""Shared by the API and the workers: settings, database models, the event log and artifact storage."""
