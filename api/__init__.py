"""Keel's HTTP API (FastAPI). Imports no torch, ray, transformers, peft or engine."""
