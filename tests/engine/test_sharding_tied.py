"""fsdp2 checkpoints of a model with tied input and output embeddings (Qwen2.5, Llama-3.2), in two
local gloo processes: the shards save and load back, and the Hugging Face export loads with plain
transformers as a tied model with the trained weights (issue 28, defect 4)."""

from __future__ import annotations

import os

import numpy as np
import torch

from bench.common import free_port


def _tied_worker(rank: int, port: int, model_dir: str, out_dir: str, queue) -> None:
    import torch.distributed as dist

    from engine.config import FSDPConfig, ModelConfig, OptimConfig
    from engine.models import load_policy, logits_at, save_model
    from engine.runtime import sharding
    from engine.schedule import build_optimizer

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        def sharded_model():
            model = load_policy(model_dir, ModelConfig(), trainable=True)
            sharding.shard_model(model, FSDPConfig(), dtype=torch.float32, device=torch.device("cpu"))
            return model, build_optimizer(model, OptimConfig(lr=1e-2))

        torch.manual_seed(0)
        model, optimizer = sharded_model()
        ids = torch.randint(3, 60, (2, 10), generator=torch.Generator().manual_seed(rank))
        positions = torch.arange(10).expand(2, 10)  # the engine calls backbone and head, not the root
        logits_at(model, ids, torch.ones_like(ids), positions).float().logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        shards = os.path.join(out_dir, "shards")
        if rank == 0:
            os.makedirs(shards)
        dist.barrier()
        sharding.save_shards(shards, "model", model, optimizer)
        full = sharding.full_model(model, True, rank)
        if full is not None:
            save_model(full, None, os.path.join(out_dir, "hf"))
        dist.barrier()
        again, again_optimizer = sharded_model()
        sharding.load_shards(shards, "model", again, again_optimizer)
        trained, loaded = sharding.full_state_dict(model), sharding.full_state_dict(again)
        if rank == 0:
            queue.put(({k: v.numpy() for k, v in trained.items()}, {k: v.numpy() for k, v in loaded.items()}))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_fsdp2_saves_and_exports_a_tied_embedding_model(tmp_path):
    import torch.multiprocessing as mp
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "tied")
    port = free_port()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_tied_worker, args=(r, port, str(tmp_path / "tied"), str(tmp_path), queue))
             for r in range(2)]
    for p in procs:
        p.start()
    trained, loaded = queue.get(timeout=120)
    for p in procs:
        p.join(timeout=60)
    assert all(p.exitcode == 0 for p in procs)
    for key, value in trained.items():
        assert np.array_equal(loaded[key], value), key
    # The sharded step is the unsharded one on both workers' rows (gradients summed).
    from engine.config import ModelConfig, OptimConfig
    from engine.models import load_policy, logits_at
    from engine.schedule import build_optimizer

    model = load_policy(str(tmp_path / "tied"), ModelConfig(), trainable=True)
    optimizer = build_optimizer(model, OptimConfig(lr=1e-2))
    for rank in range(2):
        ids = torch.randint(3, 60, (2, 10), generator=torch.Generator().manual_seed(rank))
        logits_at(model, ids, torch.ones_like(ids), torch.arange(10).expand(2, 10)).float().logsumexp(-1).mean().backward()
    optimizer.step()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(torch.from_numpy(trained[key]), value, rtol=0, atol=1e-5, msg=key)
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert exported.config.tie_word_embeddings
    assert exported.lm_head.weight.data_ptr() == exported.model.embed_tokens.weight.data_ptr()
    state = exported.state_dict()
    for key, value in trained.items():
        assert torch.equal(state[key], torch.from_numpy(value)), key
    # The update moved the shared matrix (so the comparison above is about the trained weights).
    initial = LlamaForCausalLM.from_pretrained(tmp_path / "tied").model.embed_tokens.weight
    assert not torch.equal(initial, exported.model.embed_tokens.weight)
