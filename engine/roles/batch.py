"""The rollout batch that travels between roles: a dict of CPU tensors, one row per sample.

Layout (right-padded, so every model reads natural positions and Hugging Face pooling works)::

    input_ids       (batch, P + R)  prompt tokens, then response tokens, then padding
    attention_mask  (batch, P + R)
    prompt_lens     (batch,)        real prompt tokens per row
    responses       (batch, R)      response tokens, right-padded
    response_mask   (batch, R)      1 on real response tokens (EOS included); in a multi-turn episode
                                    1 only on the tokens the policy sampled, 0 on the environment's
                                    (the attention mask still covers them)

`P` = `data.max_prompt_length`, `R` = `data.max_response_length`: fixed widths, so batches from
several workers (or a replay buffer) concatenate without re-padding. Models only ever see a
micro-batch trimmed to its longest row (`trim`). Response token `j` of row `i` sits at position
`prompt_lens[i] + j` and is predicted by the logits (and valued by the critic) at the position
before it (`response_positions`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.data import token_budget_batches
from engine.packing import budget_batches

Batch = dict[str, torch.Tensor]


def build_batch(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], *, prompt_width: int,
                response_width: int, pad_id: int, loss_masks: Sequence[Sequence[int]] | None = None) -> Batch:
    """Lay out prompt/response id lists as a `Batch` (see the module docstring). `loss_masks` (one per
    response, its length): the response mask of multi-turn episodes, 0 on tokens the policy did not
    sample; without it every response token is 1."""
    n = len(prompts)
    width = prompt_width + response_width
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    resp = torch.full((n, response_width), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((n, response_width), dtype=torch.long)
    prompt_lens = torch.zeros(n, dtype=torch.long)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        if len(p) > prompt_width or len(r) > response_width:
            raise ValueError(f"row {i}: {len(p)}+{len(r)} tokens exceed {prompt_width}+{response_width}")
        seq = list(p) + list(r)
        input_ids[i, :len(seq)] = torch.as_tensor(seq, dtype=torch.long)
        attention_mask[i, :len(seq)] = 1
        resp[i, :len(r)] = torch.as_tensor(list(r), dtype=torch.long)
        if loss_masks is None:
            resp_mask[i, :len(r)] = 1
        else:
            if len(loss_masks[i]) != len(r):
                raise ValueError(f"row {i}: a loss mask of {len(loss_masks[i])} for {len(r)} response tokens")
            resp_mask[i, :len(r)] = torch.as_tensor(list(loss_masks[i]), dtype=torch.long)
        prompt_lens[i] = len(p)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "prompt_lens": prompt_lens,
            "responses": resp, "response_mask": resp_mask}


def num_rows(batch: Batch) -> int:
    return int(batch["input_ids"].shape[0])


def row_lengths(batch: Batch) -> list[int]:
    """Real tokens (prompt + response) per row."""
    return batch["attention_mask"].sum(-1).tolist()


def response_extent(batch: Batch) -> torch.Tensor:
    """`(batch,)` tokens after each row's prompt: a response's length; a multi-turn episode's, the
    environment's tokens included (its response mask has holes, so not the mask's sum)."""
    return batch["attention_mask"].sum(-1) - batch["prompt_lens"]


def select(batch: Batch, index: Sequence[int] | torch.Tensor) -> Batch:
    """The rows `index`, in that order (every per-row tensor)."""
    idx = torch.as_tensor(index, dtype=torch.long)
    return {k: v.index_select(0, idx) for k, v in batch.items()}


def concat(batches: Sequence[Batch]) -> Batch:
    """Rows of several batches with the same keys and widths, in order."""
    return {k: torch.cat([b[k] for b in batches], dim=0) for k in batches[0]}


def trim(batch: Batch, device: torch.device | None = None) -> Batch:
    """Cut `input_ids`/`attention_mask` to the longest row and move everything to `device`."""
    width = max(1, int(batch["attention_mask"].sum(-1).max()))
    out = {k: (v[:, :width] if k in ("input_ids", "attention_mask") else v) for k, v in batch.items()}
    return {k: v.to(device) for k, v in out.items()} if device is not None else out


def response_positions(prompt_lens: torch.Tensor, response_width: int, seq_width: int) -> torch.Tensor:
    """`(batch, R)` index of the position whose output scores response token `j`:
    `prompt_len - 1 + j`, clamped inside the (trimmed) sequence (beyond it lies padding)."""
    j = torch.arange(response_width, device=prompt_lens.device)
    return (prompt_lens[:, None] - 1 + j[None, :]).clamp(0, seq_width - 1)


def gather_response(per_position: torch.Tensor, prompt_lens: torch.Tensor, response_width: int) -> torch.Tensor:
    """Pick the response-aligned entries of a per-position tensor.

    Args:
        per_position: `(batch, seq)` or `(batch, seq, vocab)`.

    Returns:
        `(batch, R)` or `(batch, R, vocab)`.
    """
    idx = response_positions(prompt_lens, response_width, per_position.shape[1])
    if per_position.dim() == 3:
        idx = idx[..., None].expand(-1, -1, per_position.shape[-1])
    return per_position.gather(1, idx)


def micro_batches(lengths: Sequence[int], *, dynamic: bool, max_tokens: int, size: int,
                  packed: bool = False) -> list[list[int]]:
    """Row indices per micro-batch: by token budget (`dynamic`: padded size with
    `engine.data.token_budget_batches`, or real tokens when the rows are `packed`,
    `engine.packing.budget_batches`) or `size` rows at a time."""
    if not lengths:
        return []
    if dynamic and packed:
        return budget_batches(lengths, max_tokens)
    if dynamic:
        return token_budget_batches(lengths, max_tokens)
    return [list(range(i, min(i + size, len(lengths)))) for i in range(0, len(lengths), max(1, size))]


def split_sizes(total: int, parts: int) -> list[int]:
    """`total` split into `parts` sizes differing by at most one (larger first)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def mini_batch_rows(sizes: Sequence[int]) -> list[list[int]]:
    """Consecutive row indices for mini-batches of `sizes` rows (a worker's local mini-batches)."""
    out, start = [], 0
    for size in sizes:
        out.append(list(range(start, start + size)))
        start += size
    return out


def shard_rows(total: int, num_mini_batches: int, num_workers: int) -> tuple[list[list[int]], list[list[int]]]:
    """Assign rows to data-parallel workers so that every global mini-batch is split across them.

    Rows are cut into `num_mini_batches` contiguous mini-batches; each mini-batch is cut into
    `num_workers` contiguous pieces. Worker `w` gets piece `w` of every mini-batch, so its local
    mini-batch `k` is part of the global mini-batch `k`, and one optimizer step on each worker (with
    gradients summed) equals one step on the whole mini-batch: results do not depend on the number
    of workers.

    Returns:
        `(rows, mini_sizes)`: per worker, its global row indices (in order) and its local mini-batch
        sizes.
    """
    rows: list[list[int]] = [[] for _ in range(num_workers)]
    sizes: list[list[int]] = [[] for _ in range(num_workers)]
    start = 0
    for mini in split_sizes(total, num_mini_batches):
        for w, piece in enumerate(split_sizes(mini, num_workers)):
            rows[w].extend(range(start, start + piece))
            sizes[w].append(piece)
            start += piece
    return rows, sizes
