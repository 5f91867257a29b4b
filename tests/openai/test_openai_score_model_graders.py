"""`score_model` graders through `/v1/fine_tuning/alpha/graders/run`: a project's reward model (the reward
equals what the model gives, computed here with transformers directly), a policy as a judge, a `multi`
with a string_check, and the model references checked (this project's, a usable kind)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import openai
import pytest
import torch
from openai_support import jsonl

from core.config import settings
from core.models import Model

QUESTION = {"question": "What is 3 + 4?"}
CONVERSATION = [{"role": "user", "content": "{{item.question}}"},
                {"role": "assistant", "content": "{{sample.output_text}}"}]


@pytest.fixture(scope="module")
def score_dirs(demo_assets) -> dict[str, str]:
    """Under the model root: a reward model (the demo policy with a seeded score head) and a judge that
    always answers "7" (the demo policy, biased by its generation config)."""
    from transformers import AutoTokenizer, GenerationConfig

    from engine.config import ModelConfig
    from engine.models import load_reward_model, load_tokenizer, save_model

    root = Path(settings.model_roots[0]) / "grader-models"
    torch.manual_seed(0)
    save_model(load_reward_model(demo_assets["model"], ModelConfig()), load_tokenizer(demo_assets["model"]),
               root / "rm")
    shutil.copytree(demo_assets["model"], root / "judge", dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(root / "judge")
    seven = tokenizer("7", add_special_tokens=False)["input_ids"]
    config = GenerationConfig.from_pretrained(root / "judge")
    config.sequence_bias = [[seven, 50.0], [[*seven, tokenizer.eos_token_id], 100.0]]
    config.save_pretrained(root / "judge")
    return {"rm": str(root / "rm"), "judge": str(root / "judge"), "policy": demo_assets["model"]}


@pytest.fixture
def models(db, project_key, score_dirs) -> dict[str, str]:
    """Keel models of the test's project: `rm` (reward_model), `judge` and `policy` (policies)."""
    out = {}
    for name, kind in (("rm", "reward_model"), ("judge", "policy"), ("policy", "policy")):
        m = Model(project_id=project_key[0], name=name, kind=kind, format="hf", base_model="demo",
                  path=score_dirs[name])
        db.add(m)
        db.commit()
        out[name] = m.id
    return out


def grader(model: str, **extra) -> dict:
    return {"type": "score_model", "name": "judge", "model": model, "input": CONVERSATION, **extra}


def reward_of(path: str, question: str, answer: str) -> float:
    """The reward model's scalar for the conversation, as Keel scores it: the prompt through the chat
    template (generation prompt), then the answer and EOS; read with transformers alone."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                           tokenize=False)
    ids = (tokenizer(prompt, add_special_tokens=False)["input_ids"]
           + tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, 0].item()


@pytest.mark.slow
def test_reward_model_judge_and_string_check_in_one_multi(oai, models, score_dirs):
    """One run (one child process loading both models): the reward model's member equals the model's own
    scalar mapped into its range, the judge's "7" is clamped to its range, and the formula combines them."""
    spec = {"type": "multi", "name": "m", "calculate_output": "exact + rm + judge",
            "graders": {"exact": {"type": "string_check", "name": "exact", "input": "{{sample.output_text}}",
                                  "reference": "{{item.answer}}", "operation": "eq"},
                        "rm": {**grader(models["rm"], range=[-1, 3]), "name": "rm"},
                        "judge": {**grader(models["judge"], range=[0, 5], sampling_params={
                            "max_completions_tokens": 4}), "name": "judge"}}}
    r = oai.fine_tuning.alpha.graders.run(grader=spec, model_sample="7", item={**QUESTION, "answer": "7"})
    rm = -1 + 4 / (1 + math.exp(-reward_of(score_dirs["rm"], "What is 3 + 4?", "7")))
    assert r.sub_rewards == {"exact": 1.0, "rm": pytest.approx(rm, abs=1e-5), "judge": 5.0}  # said 7: clamped
    assert r.reward == pytest.approx(1.0 + rm + 5.0, abs=1e-5)
    errors = r.metadata.errors
    assert not (errors.model_grader_parse_error or errors.model_grader_server_error or errors.other_error)
    usage = r.model_grader_token_usage_per_model
    assert usage[models["judge"]]["completion_tokens"] == 2 and usage[models["rm"]]["completion_tokens"] == 0
    assert r.metadata.token_usage == sum(u["total_tokens"] for u in usage.values())


@pytest.mark.slow
def test_a_policy_judge_gives_a_number_in_range_or_a_parse_error(oai, models):
    """The random demo policy as the judge: a number in range, or reward 0 with the parse error recorded."""
    r = oai.fine_tuning.alpha.graders.run(grader=grader(models["policy"], range=[0, 10],
                                                        sampling_params={"max_completions_tokens": 6}),
                                          model_sample="7", item=QUESTION)
    assert r.metadata.sampled_model_name == models["policy"]
    if r.metadata.errors.model_grader_parse_error:
        assert r.reward == 0.0 and "holds no number" in r.metadata.errors.model_dump()["message"]
    else:
        assert 0.0 <= r.reward <= 10.0


def test_model_references_are_checked(oai, db, models, other_auth, tmp_path, demo_assets):
    for model, code in (("model-nope", "not_found"), ("gpt-4o-mini", "invalid_model")):
        for call in (oai.fine_tuning.alpha.graders.validate, oai.fine_tuning.alpha.graders.run):
            kwargs = {"model_sample": "7", "item": QUESTION} if call == oai.fine_tuning.alpha.graders.run else {}
            with pytest.raises(openai.BadRequestError) as err:
                call(grader={"type": "multi", "name": "m", "calculate_output": "j",
                             "graders": {"j": grader(model)}}, **kwargs)
            assert (err.value.code, err.value.param) == (code, "grader.graders.j.model"), model
    rft = oai.files.create(file=jsonl(tmp_path, "rft.jsonl", [{"messages": [{"role": "user", "content": "q"}],
                                                                 "question": "q"}]).open("rb"), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.jobs.create(model=demo_assets["model"], training_file=rft.id, method={
            "type": "reinforcement", "reinforcement": {"grader": grader("model-nope")}})
    assert (err.value.code, err.value.param) == ("not_found", "method.reinforcement.grader.model")
    value = db.get(Model, models["policy"])
    value.kind = "value_model"
    db.commit()
    with pytest.raises(openai.BadRequestError) as err:
        oai.fine_tuning.alpha.graders.validate(grader=grader(models["policy"]))
    assert err.value.param == "grader.model" and "value_model" in err.value.message
    # Another project's model is not found, exactly as an unknown id.
    stranger = openai.OpenAI(base_url=oai.base_url, api_key=other_auth["Authorization"].split()[1], max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        stranger.fine_tuning.alpha.graders.validate(grader=grader(models["rm"]))
    assert (err.value.code, err.value.param) == ("not_found", "grader.model")
