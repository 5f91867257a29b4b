# The API image (also runs `keel migrate`): no torch, no ray. It serves HTTP and enqueues jobs by task
# name. It holds only what `keel api` and `keel migrate` import; tests/test_deployment_images.py copies
# exactly the files these COPY lines select and imports the app from them with torch and ray made
# unimportable.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
# PIP_EXTRA: more packages for this image, e.g. `--build-arg PIP_EXTRA=s3fs` for KEEL_STORAGE_URL=s3://...
ARG PIP_EXTRA=""
# The service's own dependencies (the engine's stay out of this image); before the code, so a code
# change reuses this layer.
RUN pip install "fastapi>=0.135" "uvicorn[standard]>=0.30" "python-multipart>=0.0.9" "sqlalchemy>=2.0.30" \
      "alembic>=1.13" "psycopg[binary]>=3.2" "pydantic>=2.7" "pydantic-settings>=2.3" "celery[redis]>=5.4" \
      "redis>=5.0" "typer>=0.12" "rich>=13" "httpx>=0.27" "pyarrow>=16" "fsspec>=2024.6" "pyyaml>=6" \
      "psutil>=5.9" "fastapi-offline>=1.7" "attrs>=23" "python-dateutil>=2.8" "prometheus-client>=0.20" \
      "limits>=4.1" "cryptography>=42" "protobuf>=4.25" ${PIP_EXTRA}
COPY pyproject.toml README.md alembic.ini ./
COPY api api
COPY core core
# workers: only the dispatch side (dispatch -> celery_app, reporter -> manifest); never tasks (it imports the engine).
COPY workers/__init__.py workers/celery_app.py workers/dispatch.py workers/reporter.py workers/manifest.py workers/
COPY keel_cli keel_cli
COPY migrations migrations
COPY sdk sdk
# --no-deps: installs the `keel` command and keel_client without pulling the engine's torch and ray.
RUN pip install --no-deps -e .
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["keel", "api", "--host", "0.0.0.0", "--port", "8000"]
