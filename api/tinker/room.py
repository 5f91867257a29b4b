"""The Tinker room's routers, one per part of the protocol; `api.main` includes them after Keel's own
(outside the OpenAPI document: the `tinker` client is this surface's SDK)."""

from __future__ import annotations

from api.tinker import futures, runs, sampling, sessions, training, weights

ROUTERS = (
    sessions.router,  # client config, sessions, heartbeats, telemetry, capabilities
    training.router,  # create_model, get_info, forward_backward, optim_step
    futures.router,  # retrieve_future
    weights.router,  # save_weights, save_weights_for_sampler, load_weights, weights_info
    sampling.router,  # create_sampling_session, samplers/{id}, asample
    runs.router,  # training_runs, checkpoints (list, delete), save_weights_external, signed downloads
)
