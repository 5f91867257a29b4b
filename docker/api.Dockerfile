# The API image: no torch, no ray. It serves HTTP and enqueues work by task name.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY api api
COPY core core
COPY workers/__init__.py workers/celery_app.py workers/dispatch.py workers/
COPY keel_cli keel_cli
COPY migrations migrations
COPY sdk sdk
# Install only the service's own dependencies (the engine's stay out of this image).
RUN pip install "fastapi>=0.135" "uvicorn[standard]>=0.30" python-multipart "sqlalchemy>=2.0.30" alembic \
      "psycopg[binary]>=3.2" pydantic pydantic-settings "celery[redis]>=5.4" redis typer rich httpx pyarrow fsspec \
      pyyaml psutil fastapi-offline attrs python-dateutil \
 && pip install --no-deps -e .
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"
CMD ["keel", "api", "--host", "0.0.0.0", "--port", "8000"]
