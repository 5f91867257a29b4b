"""`keel models download` and the safe unpacking every download goes through (`keel_client.extract_tar`):
a member that would land outside the directory (absolute, `..`, a link) refuses the whole archive."""

from __future__ import annotations

import io
import shutil
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.db import session_scope
from core.models import Model


def _tar(members: list[tuple[str, bytes | None]], *, link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        if link is not None:
            info = tarfile.TarInfo("m/evil")
            info.type, info.linkname = tarfile.SYMTYPE, link
            tar.addfile(info)
    return buf.getvalue()


@pytest.mark.parametrize("members,link", [
    ([("m", None), ("m/../../escaped", b"x")], None),
    ([("m", None), ("/tmp/absolute", b"x")], None),
    ([("m", None), ("m/ok", b"x")], "/etc/passwd"),
])
def test_unsafe_archives_are_refused_whole(tmp_path, members, link):
    from keel_client import UnsafeArchive, extract_tar

    with pytest.raises(UnsafeArchive):
        extract_tar(io.BytesIO(_tar(members, link=link)), tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "escaped").exists()


def test_the_top_directory_is_dropped(tmp_path):
    from keel_client import extract_tar

    written = extract_tar(io.BytesIO(_tar([("m", None), ("m/a", b"1"), ("m/sub", None), ("m/sub/b", b"2")])),
                          tmp_path / "out")
    assert written == ["a", "sub/b"] and (tmp_path / "out" / "sub" / "b").read_bytes() == b"2"


@pytest.fixture
def hostile_server():
    """A fake Keel on loopback whose downloads hold a `../` member."""
    body = _tar([("model-x", None), ("model-x/config.json", b"{}"), ("model-x/../../pwned", b"x")])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-type", "application/x-tar")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_cli_refuses_an_archive_with_dotdot(run_keel, monkeypatch, tmp_path, hostile_server):
    monkeypatch.setenv("KEEL_URL", hostile_server)
    monkeypatch.setenv("KEEL_API_KEY", "keel_test")
    out = tmp_path / "a" / "b"
    result = run_keel("models", "download", "model-x", str(out))
    assert result.exit_code == 1 and "Unsafe archive" in result.stderr
    assert not (tmp_path / "pwned").exists() and not (out / "config.json").exists()


def test_models_download_unpacks_the_model(cli_env, run_keel, tmp_path, keel_home):
    src = keel_home / "artifacts" / "jobs" / "job-cli" / "output"
    shutil.rmtree(src, ignore_errors=True)
    (src / "adapter").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"merged")
    (src / "tokenizer.json").write_text("{}")
    (src / "adapter" / "adapter_config.json").write_text("{}")
    (src / "adapter" / "adapter_model.safetensors").write_bytes(b"lora")
    with session_scope() as db:
        model = Model(project_id=cli_env, name="m", kind="policy", format="lora", base_model="x", path=str(src))
        db.add(model)
        db.flush()
        model_id = model.id
    result = run_keel("models", "download", model_id, str(tmp_path / "adapter"))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "adapter").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors", "tokenizer.json"]
    result = run_keel("models", "download", model_id, str(tmp_path / "merged"), "--merged")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in Path(tmp_path / "merged").iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json"]
    missing = run_keel("models", "download", "model-nope", str(tmp_path / "x"))
    assert missing.exit_code == 1 and "Not Found" in missing.stderr and "model_id" in missing.stderr
