"""fsdp2 checkpoints on remote storage: every worker uploads its own shards from its own node, rank 0
adds the rest and the COMPLETE marker last, and a resumed job stages them back and continues exactly."""

from __future__ import annotations

import dataclasses

import pytest
import s3fs

from engine.config import JobRequest, Resources, SFTConfig, build_config
from engine.demo import build_demo_assets
from engine.errors import Cancelled
from engine.methods.sft import run_sft
from engine.runtime.cluster import connect
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.slow


def _request(assets, *, checkpoint_dir: str, output_dir: str, options: dict, cache: str, steps: int = 4):
    cfg = build_config(SFTConfig, {
        "data": {"train_batch_size": 16, "max_prompt_length": 32, "max_response_length": 32},
        "model": {"strategy": "fsdp2"}, "optim": {"lr": 3e-3}, "max_token_len_per_gpu": 256,
        "trainer": {"total_training_steps": steps, "save_freq": 2}})
    return JobRequest(job_id="sharded-s3", method="sft", config=cfg, model_path=assets["model"],
                      training_file=assets["sft_train"], validation_file=assets["sft_val"], output_dir=output_dir,
                      checkpoint_dir=checkpoint_dir, seed=7, storage_options=options, artifact_cache_dir=cache,
                      resources=Resources(num_workers=2, cpus_per_worker=1))


def test_fsdp2_checkpoint_round_trips_through_s3(bucket, s3_endpoint, tmp_path):
    connect(None, num_cpus=2)
    assets = build_demo_assets(tmp_path / "assets")
    # The endpoint and credentials travel with the job (as KEEL_STORAGE_OPTIONS does): the Ray workers
    # may have started before this test set AWS_ENDPOINT_URL.
    options = {"endpoint_url": s3_endpoint, "key": "testing", "secret": "testing"}
    fs = s3fs.S3FileSystem(**options)

    straight = RecordingReporter()
    run_sft(_request(assets, checkpoint_dir=str(tmp_path / "local-ckpt"), output_dir=str(tmp_path / "out0"),
                     options=options, cache=str(tmp_path / "cache")), straight)

    first = RecordingReporter(stop_after_step=2)
    request = _request(assets, checkpoint_dir=f"{bucket}/ckpt", output_dir=f"{bucket}/out", options=options,
                       cache=str(tmp_path / "cache"))
    with pytest.raises(Cancelled):
        run_sft(request, first)
    checkpoint = first.of("checkpoint")[-1]["path"]
    assert checkpoint.startswith("s3://")
    names = {p.rsplit("/", 1)[-1] for p in fs.find(checkpoint.removeprefix("s3://"))}
    assert {"model.rank0.safetensors", "model.rank1.safetensors", "shards.json", "COMPLETE"} <= names

    resumed = RecordingReporter()
    run_sft(dataclasses.replace(request, resume_from=checkpoint), resumed)
    assert resumed.steps() == [3, 4]
    assert resumed.series("train/loss") == pytest.approx(straight.series("train/loss")[2:], rel=1e-6)
