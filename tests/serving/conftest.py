"""Fixtures for the serving tests: the demo model, LoRA adapters of it (each with its merged model),
a copy of the demo model trained to call a tool under a chat template with tools, and one real Ray
Serve on loopback shared by the session."""

from __future__ import annotations

import shutil
import threading
import warnings
from pathlib import Path

import pytest
from serving_support import TOOL_TEMPLATE, WEATHER_CALL, WEATHER_TOOL


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory):
    from engine.demo import build_demo_assets

    return build_demo_assets(tmp_path_factory.mktemp("serving-demo"))


@pytest.fixture(scope="session")
def adapters(demo_assets, tmp_path_factory):
    """Eight random LoRA adapters of the demo model: `[(adapter_dir, merged_model_dir)]`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("adapters")
    out = []
    for i in range(8):
        torch.manual_seed(100 + i)
        base = AutoModelForCausalLM.from_pretrained(demo_assets["model"], dtype=torch.float32)
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                "up_proj", "down_proj"], init_lora_weights=False)
        model = get_peft_model(base, config)
        with torch.no_grad():  # random B as well as A, small enough to keep the outputs sensible
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.mul_(0.5)
        adapter_dir, merged_dir = root / f"a{i}", root / f"a{i}-merged"
        model.save_pretrained(adapter_dir)
        model.merge_and_unload().save_pretrained(merged_dir)
        shutil.copy(Path(demo_assets["model"]) / "tokenizer.json", merged_dir)
        for name in ("tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
            if (Path(demo_assets["model"]) / name).exists():
                shutil.copy(Path(demo_assets["model"]) / name, merged_dir)
        out.append((str(adapter_dir), str(merged_dir)))
    return out


@pytest.fixture(scope="session")
def tool_model(demo_assets, tmp_path_factory):
    """The demo model fine-tuned (a few hundred steps on one conversation) to answer a weather
    question with a `get_weather` tool call, saved with `TOOL_TEMPLATE`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_assets["model"])
    tok.chat_template = TOOL_TEMPLATE
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    prompt = tok.apply_chat_template(messages, tools=[WEATHER_TOOL], tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    answer_ids = tok(WEATHER_CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(demo_assets["model"], dtype=torch.float32)
    ids = torch.tensor([prompt_ids + answer_ids])
    labels = ids.clone()
    labels[0, :len(prompt_ids)] = -100
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(400):
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 1e-3:
            break
    out = tmp_path_factory.mktemp("tool-model")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)



@pytest.fixture(scope="session")
def serve_url():
    """One Ray Serve on loopback for the session: the ingress on a free port, two adapters per replica
    (so a third evicts one), replicas released after 3 idle seconds."""
    import ray
    from ray import serve

    from bench.common import free_port
    from engine.runtime.cluster import connect
    from engine.serving.deployment import start

    connect(None, num_cpus=2)
    url = start("127.0.0.1", free_port(), {"max_adapters": 2, "idle_s": 3.0, "max_batch": 16, "replica_cpus": 0.5,
                                           "max_replicas": 1})
    yield url
    # Bounded: this runs at the session's end, after every other test of the group, and a Serve or Ray
    # shutdown that hangs (a replica stuck in its drain) must not hold the whole run until its timeout.
    stopper = threading.Thread(target=lambda: (serve.shutdown(), ray.shutdown()), daemon=True)
    stopper.start()
    stopper.join(90)
    if stopper.is_alive():
        warnings.warn("Serve and Ray did not shut down within 90 s; the process exit ends them", stacklevel=1)
