# The worker image: torch, transformers, peft and ray. Every Ray node runs it: the Ray head, plain Ray
# workers, and the Celery workers, which are Ray nodes too (docker/worker-entrypoint.sh).
#
# Build args: TORCH_INDEX picks the torch wheels (CPU by default); EXTRAS adds pyproject extras;
# RAY_VERSION pins Ray, which must be the same on every node and driver of a cluster (and matches
# rayVersion in deploy/k8s/raycluster.yaml). ray[default] brings the dashboard and its agent, which
# `ray start --head` and KubeRay's health probes use.
# The GPU variant (docker-compose.yml, profile `gpu`):
#   --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 --build-arg EXTRAS=gpu
# (the CUDA wheels carry their own CUDA runtime; the host needs the NVIDIA driver and container toolkit).
FROM python:3.11-slim
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ARG EXTRAS=""
ARG RAY_VERSION=2.60.0
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1: with 0, `ray start --address` refuses to join a cluster and Ray
# takes 127.0.0.1 as this host's address. engine.cluster sets 0 when unset (right for the loopback-only
# Ray of `keel up`), so a container in a cluster sets it explicitly.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    RAY_USAGE_STATS_ENABLED=0 RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1
WORKDIR /app
# torch first, from the chosen index, so `pip install .` below finds it satisfied.
RUN pip install --index-url ${TORCH_INDEX} "torch>=2.12"
COPY . .
RUN pip install -e ".${EXTRAS:+[$EXTRAS]}" "ray[default]==${RAY_VERSION}"
# The default command is the Celery worker as a Ray node; the Ray head and plain Ray workers run
# `ray start ...` instead (docker-compose.yml, deploy/k8s/raycluster.yaml).
CMD ["/app/docker/worker-entrypoint.sh", "--num-cpus=2", "--", "keel", "worker", "--concurrency", "1"]
