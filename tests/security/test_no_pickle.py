"""Nothing Keel reads is unpickled: a scan of the project's Python sources (the syntax tree, not the
text, so comments and strings do not count), the broker's accepted content types, and the model
loader refusing pickled weights with a payload that would leave a mark if it ever ran."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("api", "core", "workers", "engine", "keel_cli", "bench", "sdk", "migrations", "scripts")
"""What ships (tests are not scanned: a test may well build a pickle to prove it is refused)."""
SERVICE = ("api", "core", "workers", "engine")
"""Where a model may be loaded from a path a user named: `from_pretrained` must insist on safetensors."""
PICKLE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "joblib", "shelve", "marshal"}
WEIGHT_CLASSES = ("AutoModel", "PreTrainedModel")
"""`from_pretrained` of these (and of any `...For<Task>` class) loads weights; tokenizers and configs do not."""
ALLOWED = {("engine/models/loading.py", "PeftModel.from_pretrained")}
"""peft picks safetensors itself when the file is there; `engine.models.loading._checked_paths` refuses an
adapter directory without `adapter_model.safetensors` first (see the last test)."""


def sources() -> list[Path]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts]
    assert len(files) > 100, "the scan found too few files: was the tree moved?"
    return files


def _name(node: ast.AST) -> str:
    """`torch.load` for `torch.load`, `AutoModelForCausalLM.from_pretrained` for that, etc."""
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _name(node.func) + "()"
    return "?"


def _kw_true(call: ast.Call, name: str) -> bool:
    return any(k.arg == name and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def violations(path: Path) -> list[str]:
    rel = path.relative_to(ROOT).as_posix()
    tree = ast.parse(path.read_text(), filename=rel)
    found = []

    def report(node: ast.AST, what: str) -> None:
        found.append(f"{rel}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PICKLE_MODULES:
                    report(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in PICKLE_MODULES:
                report(node, f"from {node.module} import ...")
            if node.module == "torch" and any(a.name == "load" for a in node.names):
                report(node, "from torch import load (call torch.load with weights_only=True)")
        elif isinstance(node, ast.Call):
            name = _name(node.func)
            leaf = name.rsplit(".", 1)[-1]
            if name == "torch.load" and not _kw_true(node, "weights_only"):
                report(node, "torch.load without weights_only=True")
            if leaf == "load" and name.split(".")[0] in ("np", "numpy") and _kw_true(node, "allow_pickle"):
                report(node, "numpy.load with allow_pickle=True")
            if leaf == "read_pickle" or name in ("torch.serialization.load",):
                report(node, name)
            if name.split(".")[0] == "yaml" and leaf in ("load", "load_all", "unsafe_load", "full_load",
                                                         "unsafe_load_all", "full_load_all"):
                report(node, f"{name} (use yaml.safe_load)")
            if _kw_true(node, "trust_remote_code"):
                report(node, f"{name}(trust_remote_code=True)")
            if leaf == "from_pretrained" and rel.split("/")[0] in SERVICE:
                owner = name.rsplit(".", 2)[-2] if "." in name else ""
                loads_weights = owner.startswith(WEIGHT_CLASSES) or "For" in owner or owner == "PeftModel"
                if (loads_weights and not _kw_true(node, "use_safetensors")
                        and (rel, f"{owner}.from_pretrained") not in ALLOWED):
                    report(node, f"{name} without use_safetensors=True")
    return found


def test_no_source_unpickles_anything():
    problems = [v for path in sources() for v in violations(path)]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(("code", "expected"), [
    ("import pickle", "import pickle"),
    ("from cloudpickle import loads", "from cloudpickle"),
    ("import torch\ntorch.load(f)", "torch.load without weights_only=True"),
    ("import torch\ntorch.load(f, weights_only=False)", "torch.load without weights_only=True"),
    ("from torch import load", "from torch import load"),
    ("import numpy as np\nnp.load(f, allow_pickle=True)", "numpy.load with allow_pickle=True"),
    ("import pandas as pd\npd.read_pickle(f)", "pd.read_pickle"),
    ("import yaml\nyaml.load(s)", "yaml.load (use yaml.safe_load)"),
    ("AutoTokenizer.from_pretrained(p, trust_remote_code=True)", "trust_remote_code=True"),
    ("AutoModelForCausalLM.from_pretrained(p)", "without use_safetensors=True"),
    ("transformers.AutoModel.from_pretrained(p, use_safetensors=False)", "without use_safetensors=True"),
    ("PeftModel.from_pretrained(m, p)", "without use_safetensors=True"),
])
def test_the_scan_catches_what_it_should(tmp_path, monkeypatch, code, expected):
    """The scan itself is tested: each pattern, planted in a service module, is reported."""
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    path = tmp_path / "engine" / "planted.py"
    path.parent.mkdir()
    path.write_text(code + "\n")
    found = violations(path)
    assert len(found) == 1 and expected in found[0], found


@pytest.mark.parametrize("code", [
    "import torch\ntorch.load(f, map_location='cpu', weights_only=True)",
    "import yaml\nyaml.safe_load(s)",
    "AutoTokenizer.from_pretrained(p, trust_remote_code=False)",
    "AutoConfig.from_pretrained(p)",
    "AutoModelForSequenceClassification.from_pretrained(p, num_labels=1, use_safetensors=True)",
    "# import pickle\ns = 'torch.load(f)'",
])
def test_the_scan_allows_what_is_safe(tmp_path, monkeypatch, code):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    path = tmp_path / "engine" / "planted.py"
    path.parent.mkdir()
    path.write_text(code + "\n")
    assert violations(path) == []


def test_the_broker_accepts_json_only():
    """A Celery worker that accepted pickle would run whatever a broker message carried."""
    from workers.celery_app import celery_app

    conf = celery_app.conf
    assert set(conf.accept_content) <= {"json", "application/json"}
    assert set(conf.result_accept_content or conf.accept_content) <= {"json", "application/json"}
    assert conf.task_serializer == "json" and conf.result_serializer == "json"


class _Payload:
    """Unpickling this creates the marker file: proof that pickled bytes were (or were not) executed."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_pickled_weights_are_never_loaded(tmp_path):
    """A model directory whose weights are a pickle (pytorch_model.bin), and an adapter whose weights
    are (adapter_model.bin): both are refused, and the payload never runs."""
    models = pytest.importorskip("engine.models")
    from engine.config import ModelConfig
    from engine.errors import ModelNotAllowed

    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(marker))
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 8,
        "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
        "max_position_embeddings": 32}))
    (base / "pytorch_model.bin").write_bytes(payload)
    roots = [str(tmp_path)]
    with pytest.raises((OSError, ValueError, EnvironmentError)):
        models.load_policy(str(base), ModelConfig(), allowed_roots=roots)
    assert not marker.exists()

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base),
                                                             "peft_type": "LORA", "r": 2}))
    (adapter / "adapter_model.bin").write_bytes(payload)
    with pytest.raises(ModelNotAllowed, match="adapter_model.safetensors"):
        models.load_policy(str(base), ModelConfig(lora_rank=2, lora_adapter_path=str(adapter)), allowed_roots=roots)
    with pytest.raises(ModelNotAllowed, match="adapter_model.safetensors"):
        models.load_policy(str(adapter), ModelConfig(lora_rank=2), allowed_roots=roots)
    assert not marker.exists()
