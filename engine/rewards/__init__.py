"""Everything that scores a response: rule rewards (`rules`, a registry of Python functions) and
OpenAI-style graders (`graders`, the entry point, with `grader_spec` validation and templates,
`formula` for `multi` graders, `similarity` for text graders, `score_model` for model graders, and
`sandbox` / `sandboxed`, the isolated process a `python` grader runs in).
"""
