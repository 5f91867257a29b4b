"""Inference on Ray Serve: the CPU continuous-batching engine with multi-LoRA, the vLLM engine for GPU
nodes, OpenAI-shaped answers, and the Serve application the API forwards to (docs/inference.md)."""
