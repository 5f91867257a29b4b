"""The SDK's sources: `generate.py`, the OpenAPI snapshot, templates and hand-written helpers.

The generated package itself is `sdk/keel_client` (installed as the top-level `keel_client`)."""
