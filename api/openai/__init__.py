"""The OpenAI-compatible surface, one room: the fine-tuning API (`/v1/fine_tuning/...`), its alpha
graders endpoints, their request and response shapes, and OpenAI's error object (docs/openai.md)."""
