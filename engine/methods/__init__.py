"""The training methods, one module per job method, each a readable entry point `run_<method>(request,
reporter)` (like verl's trainers or torchtune's recipes): `sft`, `reward_model` (Bradley-Terry),
`rm_distill` (a teacher reward model distilled into a student), `dpo`, `ppo` (the single-controller
loop over `engine.roles`), `distill_policy` (on-policy distillation: PPO's loop with a teacher role)
and `evaluate`.

`supervised` is the loop that SFT, reward-model training and distillation share; `pair_scores` caches
what a pair method computes once before training. The `ppo_*` modules hold what the PPO loop calls:
`ppo_dispatch` (talking to the roles), `ppo_rollout`, `ppo_experience` (rollouts into advantages),
`ppo_update`, `ppo_validation` and `ppo_checkpoint`. `engine.runtime.jobs` maps a job's method name to
its entry point here.
"""
