"""A client library for accessing Keel"""

from .client import AuthenticatedClient, Client
from .download import DownloadError, UnsafeArchive, download_checkpoint, download_model, extract_tar
from .stream import JobFailed, StreamError, stream_events, wait_for_job

__all__ = (
    "AuthenticatedClient",
    "Client",
    "DownloadError",
    "JobFailed",
    "StreamError",
    "UnsafeArchive",
    "download_checkpoint",
    "download_model",
    "extract_tar",
    "stream_events",
    "wait_for_job",
)
