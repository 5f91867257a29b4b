"""What every method runs on: the Ray cluster and the job's controller actor (`cluster`, `jobs`),
data-parallel worker groups and their process group (`distributed`), FSDP2 sharding, mixed precision
and Ulysses sequence parallelism (`sharding`, `precision`, `ulysses`), checkpoints and the artifact
store seen from any node (`checkpoint`, `artifacts`), the step watchdog and time limit (`watchdog`),
the run's manifest (`manifest`) and how a method reports (`reporting`).
"""
