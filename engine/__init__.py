"""Keel's training engine: pure PPO math, models, data and the training methods.

The engine never imports `api`, `workers` or `core`: it takes plain paths and frozen configs and
reports through a `Reporter`, so it runs the same under the service, in tests and in benchmarks.
"""
