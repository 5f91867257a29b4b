"""A local S3-compatible server for the remote-storage tests: moto's server mode on 127.0.0.1 and a
free port, in its own process group (never an outside host). Credentials are moto's dummies; the
endpoint reaches every process through `AWS_ENDPOINT_URL` (honoured by botocore, so by s3fs)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.common import free_port

pytest.importorskip("s3fs")
pytest.importorskip("moto")


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
          "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="session")
def s3_endpoint(keel_home: Path):
    """`moto_server` for the session; yields its endpoint URL. The AWS_* settings go into this process's
    environment (so into every process the tests start)."""
    import httpx

    port = free_port()
    log = keel_home / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in (*S3_ENV, "AWS_ENDPOINT_URL")}
    os.environ.update({**S3_ENV, "AWS_ENDPOINT_URL": endpoint})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(endpoint, timeout=1.0)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start:\n{log.read_text(errors='replace')}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def bucket(s3_endpoint) -> str:
    """A fresh, empty bucket; yields its `s3://` URL."""
    import s3fs

    name = f"keel-{secrets.token_hex(6)}"
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint)
    fs.mkdir(name)
    return f"s3://{name}"
