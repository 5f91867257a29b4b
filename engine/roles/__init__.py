"""PPO roles as plain classes: `actor.ActorRollout`, `critic.Critic`, `reference.Reference`,
`reward.Reward`; `remote` wraps them with `ray.remote` once and places them; `batch` is the data
they exchange."""
