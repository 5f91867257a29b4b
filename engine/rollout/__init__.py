"""Generation: the rollout backends behind one interface (`backends`: the interface and the choice by
name; `hf`: Keel's HF decode with a KV cache; `vllm`: vLLM on GPU nodes; `sampling`: what both share,
counter-based sampling and the weights fingerprint), the lean decode steps the HF backend runs
(`decode`), and response logits that compute each shared prompt once (`prefix`).
"""
