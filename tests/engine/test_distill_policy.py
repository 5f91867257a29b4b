"""engine.methods.distill_policy end to end on the demo model (CPU): a teacher that differs from the
student (the demo policy fine-tuned briefly by SFT here, with plain torch), the student distilled on
its own samples, and the student's reverse KL to the teacher measured outside Keel (plain
transformers on the saved weights, held-out prompts)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.config import DistillPolicyConfig, JobRequest, Resources, build_config
from engine.errors import ConfigError
from engine.methods.distill_policy import DistillPolicyTrainer, run_distill_policy
from engine.runtime.reporting import RecordingReporter

pytestmark = pytest.mark.slow

MAX_RESPONSE = 12
SPEC = {
    "data": {"train_batch_size": 8, "max_prompt_length": 32, "max_response_length": MAX_RESPONSE},
    "actor": {"ppo_mini_batch_size": 8, "ppo_epochs": 1, "optim": {"lr": 1e-2}},
    "rollout": {"n": 4},
    # The student is meant to leave its starting point: KL to it is not a failure here.
    "guardrails": {"warn_kl": 100.0, "rollback_kl": 5.0},
}


def _prompt_ids(tokenizer, prompt: str) -> list[int]:
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                         tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="session")
def teacher(demo_assets, tmp_path_factory) -> str:
    """The demo policy after 20 SFT steps on the demo's arithmetic answers: it answers in their
    format, which the untrained student does not (over half a nat per token of reverse KL)."""
    return build_teacher(demo_assets, tmp_path_factory.mktemp("teacher"))


def build_teacher(demo_assets, out: Path, *, steps: int = 20, lr: float = 1e-3) -> str:
    tokenizer = AutoTokenizer.from_pretrained(demo_assets["model"])
    model = AutoModelForCausalLM.from_pretrained(demo_assets["model"], dtype=torch.float32)
    rows = pq.read_table(demo_assets["sft_train"]).to_pylist()
    examples = []
    for r in rows:
        prompt = _prompt_ids(tokenizer, r["prompt"])
        response = tokenizer(r["response"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        examples.append((prompt, response))
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        batch = [examples[(step * 16 + i) % len(examples)] for i in range(16)]
        width = max(len(p) + len(r) for p, r in batch)
        ids = torch.full((len(batch), width), tokenizer.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (p, r) in enumerate(batch):
            ids[i, :len(p) + len(r)] = torch.tensor(p + r)
            labels[i, len(p):len(p) + len(r)] = torch.tensor(r)
            attention[i, :len(p) + len(r)] = 1
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def reverse_kl(student_dir: str, teacher_dir: str, prompts_file: str, *, prompts: int = 32,
               samples: int = 4) -> float:
    """Mean over the student's sampled response tokens of log p_student - log p_teacher (temperature 1,
    at most MAX_RESPONSE tokens), on the first `prompts` held-out prompts: the per-token reverse KL
    KL(student || teacher), estimated with transformers alone."""
    tokenizer = AutoTokenizer.from_pretrained(student_dir)
    student = AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32).eval()
    teacher_model = AutoModelForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).eval()
    rows = pq.read_table(prompts_file).to_pylist()[:prompts]
    total, tokens = 0.0, 0
    generator_seed = 1000
    with torch.no_grad():
        for r in rows:
            prompt = torch.tensor([_prompt_ids(tokenizer, r["prompt"])])
            torch.manual_seed(generator_seed)
            generator_seed += 1
            out = student.generate(prompt.expand(samples, -1), attention_mask=torch.ones_like(prompt).expand(
                samples, -1), do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=MAX_RESPONSE,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
            for seq in out:
                response = seq[prompt.shape[1]:].tolist()
                if tokenizer.eos_token_id in response:  # what follows EOS is padding
                    response = response[:response.index(tokenizer.eos_token_id) + 1]
                ids = torch.tensor([prompt[0].tolist() + response])
                start = prompt.shape[1]
                target = ids[0, start:]
                for model, sign in ((student, 1.0), (teacher_model, -1.0)):
                    logits = model(input_ids=ids).logits[0, start - 1:-1].float()
                    total += sign * float(torch.log_softmax(logits, -1).gather(-1, target[:, None]).sum())
                tokens += len(response)
    return total / tokens


def make_request(assets, teacher_dir: str, tmp: Path, *, steps: int, overrides: dict | None = None,
                 reward: dict | None = None, teacher_path: str | None = "same") -> JobRequest:
    spec = {**SPEC, "trainer": {"total_training_steps": steps, "save_freq": 0, "test_freq": 0}, **(overrides or {})}
    return JobRequest(
        job_id="distill-test", method="distill_policy", config=build_config(DistillPolicyConfig, spec),
        model_path=assets["model"], training_file=assets["prompts_train"], output_dir=str(tmp / "out"),
        checkpoint_dir=str(tmp / "ckpt"), seed=3, reward=reward or {},
        teacher_path=teacher_dir if teacher_path == "same" else teacher_path,
        resources=Resources(num_workers=1, executor="local"))


@pytest.fixture(scope="module")
def distilled(demo_assets, teacher, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("distill")
    reporter = RecordingReporter()
    result = run_distill_policy(make_request(demo_assets, teacher, tmp, steps=12), reporter)
    return {"reporter": reporter, "result": result}


def test_student_reverse_kl_to_teacher_halves(demo_assets, teacher, distilled):
    """Measured outside Keel on held-out prompts: KL(student || teacher) per token falls by >= 50%."""
    before = reverse_kl(demo_assets["model"], teacher, demo_assets["prompts_val"])
    after = reverse_kl(distilled["result"].output_dir, teacher, demo_assets["prompts_val"])
    print(f"reverse KL per token: {before:.3f} -> {after:.3f}")
    assert before > 0.3  # the teacher differs from the student
    assert after <= 0.5 * before, (before, after)


def test_distill_metrics_follow_the_teacher(distilled):
    """`distill/reverse_kl/mean` falls over the run and `distill/teacher_logprob/mean` rises (the student
    moves to what the teacher finds likely); with no task reward the task score is 0."""
    steps = [e["values"] for e in distilled["reporter"].of("metrics")]
    assert len(steps) == 12
    kl = [s["distill/reverse_kl/mean"] for s in steps]
    teacher_lp = [s["distill/teacher_logprob/mean"] for s in steps]
    assert sum(kl[-3:]) / 3 < 0.5 * sum(kl[:3]) / 3, kl
    assert sum(teacher_lp[-3:]) / 3 > sum(teacher_lp[:3]) / 3, teacher_lp
    assert all(s["critic/score/mean"] == 0.0 for s in steps)
    assert all("timing_s/teacher" in s for s in steps)


def test_task_reward_weight_mixes_the_task_score(demo_assets, teacher, tmp_path):
    """With `task_reward_weight` the task score enters the reward: one step's `critic/rewards/mean`
    (reward summed per response) is the weight times the score minus the reverse KL summed."""
    reporter = RecordingReporter()
    request = make_request(demo_assets, teacher, tmp_path, steps=1, reward={"function": "length_penalty"},
                           overrides={"distill": {"task_reward_weight": 2.0}})
    run_distill_policy(request, reporter)
    values = reporter.of("metrics")[-1]["values"]
    assert values["critic/score/mean"] != 0.0
    assert values["distill/reverse_kl/mean"] > 0.0


def test_refuses_what_it_cannot_score(demo_assets, teacher, tmp_path):
    with pytest.raises(ConfigError) as err:
        DistillPolicyTrainer(make_request(demo_assets, teacher, tmp_path, steps=1, teacher_path=None),
                             RecordingReporter())
    assert err.value.param == "teacher"
    with pytest.raises(ConfigError) as err:
        DistillPolicyTrainer(make_request(demo_assets, teacher, tmp_path, steps=1,
                                          overrides={"distill": {"task_reward_weight": 1.0}}),
                             RecordingReporter())
    assert err.value.param == "distill.task_reward_weight"
    for spec, param in (({"algorithm": {"adv_estimator": "remax"}}, "algorithm.adv_estimator"),
                        ({"rollout": {"mode": "one_step_off"}}, "rollout.mode"),
                        ({"distill": {"reverse_kl_coef": 0.0}}, "distill.reverse_kl_coef")):
        with pytest.raises(ConfigError) as err:
            build_config(DistillPolicyConfig, spec)
        assert err.value.param == param


def test_teacher_log_probs_are_cached_per_batch(demo_assets, teacher):
    """A batch scored again costs no forward: the same log-probs come back, marked cached; another
    batch is computed."""
    from engine.roles.batch import build_batch
    from engine.roles.teacher import Teacher

    cfg = build_config(DistillPolicyConfig, SPEC)
    role = Teacher(cfg, teacher)
    tokenizer = AutoTokenizer.from_pretrained(teacher)
    prompt = _prompt_ids(tokenizer, "What is 2 + 3?")
    batch = build_batch([prompt, prompt], [[5, 6, 7], [8, 9]], prompt_width=32, response_width=MAX_RESPONSE,
                        pad_id=tokenizer.pad_token_id)
    first, again = role.compute_teacher_log_prob(batch), role.compute_teacher_log_prob(batch)
    assert not first["cached"] and again["cached"]
    assert torch.equal(first["log_probs"], again["log_probs"])
    mask = batch["response_mask"].bool()
    assert (first["log_probs"][mask] < 0).all()
    other = build_batch([prompt], [[5, 6, 8]], prompt_width=32, response_width=MAX_RESPONSE,
                        pad_id=tokenizer.pad_token_id)
    assert not role.compute_teacher_log_prob(other)["cached"]


def test_runs_on_ray_with_the_teacher_beside_the_roles(demo_assets, teacher, ray_local, tmp_path):
    """The Ray executor: the teacher is a role of the colocated workers; one step reports its metrics."""
    import dataclasses

    reporter = RecordingReporter()
    request = dataclasses.replace(make_request(demo_assets, teacher, tmp_path, steps=1),
                                  resources=Resources(num_workers=1))
    run_distill_policy(request, reporter)
    assert "teacher" in {p["role"] for p in reporter.of("placement")[0]["workers"]}
    values = reporter.of("metrics")[-1]["values"]
    assert values["distill/reverse_kl/mean"] > 0 and values["distill/teacher_logprob/mean"] < 0


def test_lora_student(demo_assets, teacher, tmp_path):
    """A LoRA student (the actor scores the reference with its adapter off; the teacher is whole)
    trains and is saved as an adapter."""
    reporter = RecordingReporter()
    request = make_request(demo_assets, teacher, tmp_path, steps=2,
                           overrides={"model": {"lora_rank": 4, "lora_alpha": 8}})
    result = run_distill_policy(request, reporter)
    assert result.model_format == "lora"
    assert all(e["values"]["distill/reverse_kl/mean"] > 0 for e in reporter.of("metrics"))
