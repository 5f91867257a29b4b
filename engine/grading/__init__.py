"""The parts of OpenAI-style graders (engine/graders.py is the entry point and documents them):
`spec` (validation, templates), `formula` (multi's arithmetic), `similarity` (text graders),
`sandbox` / `sandboxed` (python graders), `score_model` (model graders)."""
