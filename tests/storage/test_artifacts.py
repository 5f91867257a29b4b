"""`engine.runtime.artifacts` against a real S3 API (moto's server): staging into a node-local cache, cache hits,
concurrent staging, and uploads that are never visible half-done."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from engine.runtime.artifacts import Artifacts, is_remote, join

COMPLETE = "COMPLETE"


@pytest.fixture
def store(tmp_path: Path) -> Artifacts:
    return Artifacts(cache_dir=str(tmp_path / "cache"))


def _fs():
    import fsspec

    return fsspec.filesystem("s3")


def _tree(root: str | Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


def _checkpoint(tmp_path: Path, name: str, files: dict[str, bytes]) -> Path:
    root = tmp_path / name
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_local_references_are_used_in_place(store, tmp_path):
    data = tmp_path / "train.parquet"
    data.write_bytes(b"rows")
    assert not is_remote(str(data)) and is_remote("s3://b/k") and not is_remote("file:///x")
    assert store.stage(str(data)) == str(data)
    assert store.stage("org/model") == "org/model"  # a hub id passes through
    assert not os.path.exists(store.cache_root)  # local mode copies nothing


def test_stage_file_and_directory_then_hit_the_cache_until_the_remote_changes(store, bucket, tmp_path):
    fs = _fs()
    file_url = f"{bucket}/files/p/file-1"
    fs.pipe_file(file_url, b"first version")
    staged = store.stage(file_url)
    assert Path(staged).read_bytes() == b"first version" and staged.startswith(store.cache_root)

    # A cache hit copies nothing: a (deliberately) altered local copy is what comes back.
    Path(staged).write_bytes(b"tampered locally")
    assert store.stage(file_url) == staged and Path(staged).read_bytes() == b"tampered locally"

    # A rewritten object is a new version: staged again, beside the old one.
    fs.pipe_file(file_url, b"second version!")
    again = store.stage(file_url)
    assert again != staged and Path(again).read_bytes() == b"second version!"

    files = {"model.safetensors": os.urandom(3000), "extra.json": b"{}", "sub/rng.pt": b"r", COMPLETE: b"ok\n"}
    url = f"{bucket}/jobs/j/checkpoints/step_2"
    store.upload(str(_checkpoint(tmp_path, "ckpt", files)), url, marker=COMPLETE)
    directory = store.stage(url)
    assert _tree(directory) == files and os.path.isdir(directory)
    assert store.stage(url) == directory
    with pytest.raises(FileNotFoundError):
        store.stage(f"{bucket}/jobs/j/checkpoints/step_99")
    assert not [n for n in os.listdir(store.cache_root) if n.startswith(".tmp-")]


def _stage_in_a_process(url: str, cache_dir: str) -> tuple[str, dict[str, bytes]]:
    path = Artifacts(cache_dir=cache_dir).stage(url)
    return path, _tree(path)


def test_concurrent_processes_stage_once_and_never_see_a_partial_copy(bucket, tmp_path):
    files = {f"shard-{i}.bin": os.urandom(200_000) for i in range(6)} | {COMPLETE: b"ok\n"}
    url = f"{bucket}/jobs/j/output"
    Artifacts().upload(str(_checkpoint(tmp_path, "out", files)), url, marker=COMPLETE)
    cache = str(tmp_path / "node-cache")
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_stage_in_a_process, [url] * 4, [cache] * 4))
    assert len({path for path, _ in results}) == 1
    assert all(tree == files for _, tree in results)
    entries = [n for n in os.listdir(cache) if not n.endswith(".lock")]
    assert entries == [os.path.basename(results[0][0])]  # one copy, no temporary directory left behind


def test_a_failed_upload_never_leaves_a_complete_looking_directory(store, bucket, tmp_path):
    url = f"{bucket}/jobs/j/checkpoints/step_4"
    good = {"model.safetensors": b"old weights", COMPLETE: b"ok\n"}
    store.upload(str(_checkpoint(tmp_path, "good", good)), url, marker=COMPLETE)
    assert store.exists(join(url, COMPLETE))

    # The same step written again (a re-run), failing midway: a file vanishes before it is uploaded.
    bad = _checkpoint(tmp_path, "bad", {"a.safetensors": b"new", "b.safetensors": b"new", COMPLETE: b"ok\n"})
    os.symlink(tmp_path / "missing", bad / "c.safetensors")
    with pytest.raises(FileNotFoundError):
        store.upload(str(bad), url, marker=COMPLETE)
    assert not store.exists(join(url, COMPLETE))  # neither the old copy nor a mix of both looks complete

    # A writer whose block fails uploads nothing at all.
    with pytest.raises(RuntimeError), store.writing(f"{bucket}/jobs/j/output", marker=COMPLETE) as local:
        Path(local, "config.json").write_text("{}")
        raise RuntimeError("the save failed")
    assert not store.exists(f"{bucket}/jobs/j/output")
    assert not os.listdir(os.path.join(store.cache_root, "scratch"))  # scratch space is cleaned up


def test_writing_uploads_with_the_marker_last(store, bucket):
    url = f"{bucket}/jobs/j/checkpoints/step_1"
    with store.writing(url, marker=COMPLETE) as local:
        Path(local, "model.safetensors").write_bytes(b"w")
        Path(local, "extra.json").write_text('{"step": 1}')
    fs = _fs()
    names = {p.rsplit("/", 1)[-1]: info["LastModified"] for p, info in fs.find(url, detail=True).items()}
    assert set(names) == {"model.safetensors", "extra.json", COMPLETE}
    assert names[COMPLETE] >= max(names["model.safetensors"], names["extra.json"])
    with store.writing_file(join(url, "teacher_scores.parquet")) as local:
        Path(local).write_bytes(b"scores")
    assert fs.cat_file(join(url, "teacher_scores.parquet")) == b"scores"
