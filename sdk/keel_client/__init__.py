"""A client library for accessing Keel"""

from .client import AuthenticatedClient, Client
from .stream import JobFailed, StreamError, stream_events, wait_for_job

__all__ = (
    "AuthenticatedClient",
    "Client",
    "JobFailed",
    "StreamError",
    "stream_events",
    "wait_for_job",
)
