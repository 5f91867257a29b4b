"""The cookbook's on-policy distillation recipe (`recipes.distillation.on_policy_distillation`) on
local prompts: the same `train_on_policy` loop, `TeacherConfig` and `DistillationDatasetConfig` the
recipe builds, with its `PromptOnlyDatasetBuilder` reading a parquet file's `prompt` column instead
of a Hub dataset (which cannot be fetched here). Run as the recipe is: `python cookbook_distill.py
key=value...`, the key in `TINKER_API_KEY`."""

from __future__ import annotations

import asyncio

import chz
import pyarrow.parquet as pq
from tinker_cookbook import cli_utils, renderers
from tinker_cookbook.distillation import train_on_policy
from tinker_cookbook.distillation.datasets import (
    DistillationDatasetConfig,
    PromptOnlyDataset,
    PromptOnlyDatasetBuilder,
    TeacherConfig,
)
from tinker_cookbook.tokenizer_utils import get_tokenizer


@chz.chz
class LocalPromptsBuilder(PromptOnlyDatasetBuilder):
    """The recipe's prompt-only dataset, its prompts from a local parquet file."""

    prompts_file: str

    async def __call__(self) -> tuple[PromptOnlyDataset, None]:
        tokenizer = get_tokenizer(self.model_name_for_tokenizer)
        renderer = renderers.get_renderer(self.renderer_name, tokenizer=tokenizer)
        prompts = pq.read_table(self.prompts_file, columns=["prompt"]).column("prompt").to_pylist()
        return PromptOnlyDataset(prompts=prompts, batch_size=self.groups_per_batch, group_size=self.group_size,
                                 renderer=renderer, tokenizer=tokenizer, max_prompt_tokens=self.max_prompt_tokens,
                                 dataset_name=self.dataset_name), None


@chz.chz
class CLIConfig:
    """The recipe's options this run needs; `prompts_file` stands for its `dataset`."""

    model_name: str
    teacher_model: str
    prompts_file: str
    log_path: str
    renderer_name: str = "role_colon"
    base_url: str | None = None
    lora_rank: int = 8
    group_size: int = 2
    groups_per_batch: int = 2
    learning_rate: float = 1e-4
    max_tokens: int = 8
    kl_penalty_coef: float = 1.0
    max_steps: int = 2
    eval_every: int = 0
    save_every: int = 0
    behavior_if_log_dir_exists: str = "delete"


async def main(cli: CLIConfig) -> None:
    builder = LocalPromptsBuilder(
        dataset_name="local", prompts_file=cli.prompts_file, groups_per_batch=cli.groups_per_batch,
        group_size=cli.group_size, model_name_for_tokenizer=cli.model_name, renderer_name=cli.renderer_name)
    dataset = DistillationDatasetConfig(dataset_builder=builder, teacher_config=TeacherConfig(base_model=cli.teacher_model),
                                        groups_per_batch=cli.groups_per_batch)
    config = train_on_policy.Config(
        recipe_name="recipe_distillation_on_policy", learning_rate=cli.learning_rate, dataset_configs=[dataset],
        model_name=cli.model_name, renderer_name=cli.renderer_name, lora_rank=cli.lora_rank,
        max_tokens=cli.max_tokens, kl_penalty_coef=cli.kl_penalty_coef, loss_fn="importance_sampling",
        log_path=cli.log_path, base_url=cli.base_url, eval_every=cli.eval_every, save_every=cli.save_every,
        max_steps=cli.max_steps)
    cli_utils.check_log_dir(cli.log_path, behavior_if_exists=cli.behavior_if_log_dir_exists)
    await train_on_policy.main(config)


if __name__ == "__main__":
    asyncio.run(main(chz.entrypoint(CLIConfig)))
