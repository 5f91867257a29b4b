#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): SFT, reward-model and PPO steps of a Qwen2-0.5B-shaped model in
# bf16 on one NVIDIA GPU, in-process (resources.executor: local). Needs only torch, transformers,
# peft, safetensors and numpy; no Ray, no service, no network. Prints one JSON line on stdout
# (progress goes to stderr). Extra arguments pass through, e.g. `--steps 6`, `--device cpu --tiny`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
[ -x "$root/.venv/bin/python" ] && [ -z "${PYTHON:-}" ] && python="$root/.venv/bin/python"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec timeout "${KEEL_GPU_CHECK_TIMEOUT_S:-900}" "$python" -m bench.gpu_check "$@"
