"""The OpenAI-compatible surface, one room: the fine-tuning API (`/v1/fine_tuning/...`), its alpha
graders endpoints, chat completions and completions (forwarded to Ray Serve: docs/inference.md), their
request and response shapes, and OpenAI's error object (docs/openai.md)."""
