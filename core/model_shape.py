"""A model's shape for the memory plan, without torch: a Llama/Qwen2-style decoder's sizes from its
`config.json`, and the exact parameter count from its safetensors headers (an 8-byte length, then
JSON), each remembered while the files are unchanged."""

from __future__ import annotations

import json
import math
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MAX_CONFIG_BYTES = 1024**2
_MAX_HEADER_BYTES = 100 * 1024**2


class PlanError(ValueError):
    """The model's config.json lacks what the estimate needs."""


@dataclass(frozen=True)
class Architecture:
    """A Llama/Qwen2-style decoder, from config.json."""

    hidden_size: int
    num_hidden_layers: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    exact_parameters: int | None = None
    """From the safetensors headers (the stored causal LM), when readable."""
    exact_lm_head: int | None = None
    """Parameters stored under `lm_head` (0 when tied or absent)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Architecture:
        """Read the fields; multimodal configs nest the language model under `text_config`."""
        if isinstance(config.get("text_config"), Mapping) and "hidden_size" not in config:
            config = config["text_config"]

        def positive(key: str, default: int | None = None) -> int:
            value = config.get(key, default)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise PlanError(f"config.json has no positive integer {key!r}")
            return value

        hidden = positive("hidden_size")
        heads = positive("num_attention_heads")
        head_dim = config.get("head_dim")
        if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim <= 0:
            head_dim = hidden // heads
        model_type = str(config.get("model_type", ""))
        return cls(hidden_size=hidden, num_hidden_layers=positive("num_hidden_layers"),
                   intermediate_size=positive("intermediate_size"), num_attention_heads=heads,
                   num_key_value_heads=positive("num_key_value_heads", heads), head_dim=head_dim,
                   vocab_size=positive("vocab_size"), tie_word_embeddings=bool(config.get("tie_word_embeddings")),
                   attention_bias=bool(config.get("attention_bias", model_type.startswith("qwen2"))))

    @classmethod
    def from_dir(cls, path: str | Path) -> Architecture | None:
        """The architecture of a model directory (None: no readable config.json there); the exact
        count from its safetensors headers when they can be read. Remembered while the directory's
        config.json and weight files keep their size and modification time (every job create and
        dry run asks, and a large model's headers take milliseconds to parse)."""
        stamp = _dir_stamp(path)
        if stamp is not None and (hit := _ARCHITECTURES.get(str(path))) is not None and hit[0] == stamp:
            return hit[1]
        arch = cls._read_dir(path)
        if stamp is not None:
            if len(_ARCHITECTURES) >= 256:
                _ARCHITECTURES.clear()
            _ARCHITECTURES[str(path)] = (stamp, arch)
        return arch

    @classmethod
    def _read_dir(cls, path: str | Path) -> Architecture | None:
        config = read_config(path)
        if config is None:
            return None
        arch = cls.from_config(config)
        counts = safetensors_counts(path)
        if counts is None:
            return arch
        total, lm_head = counts
        return cls(**{**arch.__dict__, "exact_parameters": total, "exact_lm_head": lm_head})

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    def layer_parameters(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        if self.attention_bias:
            attention += self.q_dim + 2 * self.kv_dim
        return attention + 3 * h * i + 2 * h  # + the two RMSNorm weights

    def parameters(self, head: str = "lm") -> int:
        """All parameters with the `lm` head (a causal LM) or the `score` head (a reward or value
        model: no LM head, one output per hidden state)."""
        h, v = self.hidden_size, self.vocab_size
        lm_head = 0 if self.tie_word_embeddings else v * h
        if self.exact_parameters is not None:
            body = self.exact_parameters - (self.exact_lm_head if self.exact_lm_head is not None else lm_head)
        else:
            body = v * h + self.num_hidden_layers * self.layer_parameters() + h
        return body + (lm_head if head == "lm" else h)

    def lora_parameters(self, rank: int) -> int:
        """Adapter parameters of rank `rank` on every linear layer of every decoder layer."""
        h, i = self.hidden_size, self.intermediate_size
        shapes = [(h, self.q_dim), (h, self.kv_dim), (h, self.kv_dim), (self.q_dim, h), (h, i), (h, i), (i, h)]
        return self.num_hidden_layers * rank * sum(a + b for a, b in shapes)


_ARCHITECTURES: dict[str, tuple[tuple, Architecture | None]] = {}


def _dir_stamp(path: str | Path) -> tuple | None:
    """What `Architecture.from_dir` reads, by (name, inode, size, mtime): a changed, added or removed
    file changes it. None when the directory cannot be listed."""
    files = []
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name == "config.json" or entry.name.endswith(".safetensors"):
                    st = entry.stat()
                    files.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
    except OSError:
        return None
    return tuple(sorted(files))


_CONFIGS: dict[str, tuple[tuple[int, int, int], dict[str, Any] | None]] = {}
"""`read_config`'s answers by file, with the file's (inode, size, mtime) when read."""


def read_config(path: str | Path) -> dict[str, Any] | None:
    """config.json of a model directory (bounded read; never opens a FIFO or a device). Remembered
    while the file keeps its inode, size and mtime: every job create reads it. The dict is shared
    between callers: read it, do not change it."""
    file = os.path.join(path, "config.json")
    try:
        st = os.stat(file)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    if (hit := _CONFIGS.get(file)) is not None and hit[0] == stamp:
        return hit[1]
    try:
        with open(file, "rb") as f:
            raw = f.read(_MAX_CONFIG_BYTES + 1)
        data = json.loads(raw) if len(raw) <= _MAX_CONFIG_BYTES else None
    except (OSError, ValueError):
        return None
    config = data if isinstance(data, dict) else None
    if len(_CONFIGS) >= 256:  # a bound, not an LRU: models in use come back at once
        _CONFIGS.clear()
    _CONFIGS[file] = (stamp, config)
    return config


def safetensors_counts(path: str | Path) -> tuple[int, int] | None:
    """(parameters, of which `lm_head`) from the headers of the directory's weight files (adapters
    left out); None when there are none or one is unreadable."""
    files = sorted(f for f in Path(path).glob("*.safetensors") if not f.name.startswith("adapter_"))
    if not files:
        return None
    total = lm_head = 0
    try:
        for file in files:
            if not file.is_file():
                return None
            with file.open("rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
                if n > _MAX_HEADER_BYTES:
                    return None
                header = json.loads(f.read(n))
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                numel = math.prod(int(d) for d in entry["shape"])
                total += numel
                if "lm_head" in name:
                    lm_head += numel
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return total, lm_head
