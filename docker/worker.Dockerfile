# The worker image: torch, transformers, peft and ray. Also the image of the Ray head and Ray workers.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 RAY_USAGE_STATS_ENABLED=0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
WORKDIR /app
COPY . .
RUN pip install --index-url ${TORCH_INDEX} "torch>=2.4" && pip install -e .
CMD ["keel", "worker", "--concurrency", "1"]
