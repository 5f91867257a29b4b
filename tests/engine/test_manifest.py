"""The node's part of a job's manifest (`engine.runtime.manifest`): what it holds, that it names no path, the
image digest from KEEL_IMAGE_DIGEST, and the model fingerprint: stable, cached, and changed by a
changed weight anywhere in a large file."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys

import pytest

from engine.config import JobRequest, Resources, SFTConfig, build_config
from engine.runtime import manifest
from engine.runtime.reporting import RecordingReporter


def _request(demo_assets, tmp_path) -> JobRequest:
    cfg = build_config(SFTConfig, {"trainer": {"total_training_steps": 2}})
    return JobRequest(job_id="manifest", method="sft", config=cfg, model_path=demo_assets["model"],
                      training_file=demo_assets["sft_train"], output_dir=str(tmp_path / "out"),
                      checkpoint_dir=str(tmp_path / "ckpt"), seed=9, resources=Resources(executor="local"),
                      artifact_cache_dir=str(tmp_path / "cache"))


def test_collect_records_versions_config_seeds_model_and_hardware_without_paths(demo_assets, tmp_path, monkeypatch):
    monkeypatch.setenv("KEEL_IMAGE_DIGEST", "sha256:" + "ab" * 32)
    request = _request(demo_assets, tmp_path)
    reporter = RecordingReporter()
    manifest.record(request, reporter)
    data = reporter.of("manifest")[0]["data"]
    assert data["packages"]["torch"] == importlib.metadata.version("torch")
    assert data["packages"]["vllm"] is None or isinstance(data["packages"]["vllm"], str)
    assert data["config"]["trainer"]["total_training_steps"] == 2 and "lr" in data["config"]["optim"]
    assert data["seeds"]["seed"] == 9
    assert data["resources"]["executor"] == "local"
    assert len(data["base_model"]["sha256"]) == 64 and data["base_model"]["algorithm"] == manifest.FINGERPRINT
    assert data["hardware"]["cpu_count"] == os.cpu_count()
    ray = sys.modules.get("ray")  # an earlier test of the session may have started Ray in this process
    assert (data["hardware"]["ray_nodes"] is None) == (ray is None or not ray.is_initialized())
    assert data["image_digest"] == "sha256:" + "ab" * 32
    shown = json.dumps(data)
    for path in (demo_assets["model"], demo_assets["sft_train"], str(tmp_path)):
        assert path not in shown

    monkeypatch.delenv("KEEL_IMAGE_DIGEST")
    assert manifest.collect(request)["image_digest"] is None


def test_a_manifest_that_cannot_be_collected_never_fails_the_run(demo_assets, tmp_path, monkeypatch):
    def broken(request):
        raise OSError("no /proc here")

    monkeypatch.setattr(manifest, "collect", broken)
    reporter = RecordingReporter()
    manifest.record(_request(demo_assets, tmp_path), reporter)
    assert reporter.of("manifest") == []


def test_the_model_fingerprint_is_stable_cached_and_follows_the_weights(tmp_path, monkeypatch):
    model = tmp_path / "model"
    (model / "adapter").mkdir(parents=True)
    (model / "config.json").write_text('{"hidden_size": 8}')
    (model / "adapter" / "adapter_config.json").write_text('{"r": 4}')
    big = model / "model.safetensors"
    monkeypatch.setattr(manifest, "WHOLE_BYTES", 4 * 1024 * 1024)  # sampled above 4 MiB here
    data = bytearray(os.urandom(12 * 1024 * 1024))
    big.write_bytes(data)
    cache = str(tmp_path / "cache")
    first = manifest.model_fingerprint(str(model), cache)
    assert first == manifest.model_fingerprint(str(model), cache)
    # Cached on disk: a fresh process (an empty memory cache) reads it back without hashing.
    manifest._fingerprints.clear()
    monkeypatch.setattr(manifest, "_file_digest", lambda *a: pytest.fail("hashed again"))
    assert manifest.model_fingerprint(str(model), cache) == first
    monkeypatch.undo()
    monkeypatch.setattr(manifest, "WHOLE_BYTES", 4 * 1024 * 1024)

    middle = manifest.HEAD_BYTES + 5 * (len(data) - 2 * manifest.HEAD_BYTES - manifest.SAMPLE_BYTES) // 15
    data[middle] ^= 0xFF  # a byte inside a sampled slice
    big.write_bytes(data)
    os.utime(big, ns=(1, 1))
    changed = manifest.model_fingerprint(str(model), cache)
    assert changed != first
    (model / "adapter" / "adapter_config.json").write_text('{"r": 8}')
    assert manifest.model_fingerprint(str(model), cache) not in (first, changed)
    assert manifest.model_fingerprint("Qwen/Qwen2.5-0.5B", cache) is None  # a hub id: nothing local to hash
