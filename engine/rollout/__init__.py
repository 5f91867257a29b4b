"""Generation: the rollout backends behind one interface (`backends`: Keel's HF decode with a KV
cache, and vLLM on GPU nodes), the lean decode steps the HF backend runs (`decode`), and response
logits that compute each shared prompt once (`prefix`).
"""
