"""Interactive trainers (Tinker-style primitives): a model held by a named Ray actor, driven one
operation at a time: `forward_backward`, `forward`, `optim_step`, `sample`, `save_state`,
`load_state`, `save_weights_for_sampler`.

- `spec`: `SessionSpec`, what a trainer holds and where it runs;
- `datums`: payload checks and normalisation (pure Python);
- `session`: `TrainingSession`, the plain class that does the work (`forward`, `sampling`, `state`);
- `lora_host`: `LoraHost`, the LoRA trainers of one base model over one copy of its weights;
- `host`: where a trainer runs and its lifecycle (`run_operation`, `release_session`, `session_alive`):
  an actor of its own (full-parameter) or its base model's shared `LoraHost` (LoRA).

Importing this package loads neither torch nor Ray.
"""

from engine.interactive.datums import OPERATIONS, validate_payload
from engine.interactive.host import release_session, run_operation, session_alive
from engine.interactive.spec import SessionSpec

__all__ = ["OPERATIONS", "SessionSpec", "release_session", "run_operation", "session_alive", "validate_payload"]
