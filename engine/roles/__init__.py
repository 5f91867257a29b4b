"""PPO roles as plain classes: `actor.ActorRollout`, `critic.Critic`, `reference.Reference`,
`reward.Reward`; `remote` wraps them with `ray.remote` once and places them; `batch` is the data
they exchange. What they share: the worker base (`base`), the batched forwards (`forward`) and the
trained roles' optimizer step, snapshots and checkpoints (`trainable`)."""
