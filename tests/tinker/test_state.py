"""Saved training state through the official `tinker` client against a live Keel: `save_state` is a
`tinker://<model>/weights/<name>` checkpoint; `create_training_client_from_state` resumes it to the
same forward loss, `..._with_optimizer` also to the same next step; a model loads a checkpoint back
(with and without its optimizer state); a load that names a sampler snapshot or another project's
path fails as a user error naming `path`."""

from __future__ import annotations

import httpx
import pytest
import tinker
from tinker import types
from tinker._exceptions import RequestFailedError
from tinker_data import supervised

ADAM = types.AdamParams(learning_rate=5e-3, grad_clip_norm=1.0)


def _loss(tc, data) -> float:
    return tc.forward(data, "cross_entropy").result().metrics["loss:sum"]


def _step(tc, data) -> float:
    """One training step; the loss it took the gradient of."""
    fb = tc.forward_backward(data, "cross_entropy")
    tc.optim_step(ADAM).result()
    return fb.result().metrics["loss:sum"]


def _delete_trainer(url: str, key: str, model_id: str) -> None:
    """Free the training client's actor (the session's Ray has two CPUs) through the native routes."""
    headers = {"Authorization": f"Bearer {key.removeprefix('tml-')}"}
    trainers = httpx.get(f"{url}/v1/trainers", params={"limit": 100}, headers=headers, timeout=30).json()["data"]
    [trainer] = [t for t in trainers if t["metadata"].get("tinker_model_id") == model_id]
    httpx.delete(f"{url}/v1/trainers/{trainer['id']}", headers=headers, timeout=30).raise_for_status()


@pytest.mark.filterwarnings("ignore:DEPRECATED. TrainingClient.load_state:FutureWarning")  # the legacy form, on purpose
def test_save_state_and_resume_with_and_without_optimizer(service, base_model, tinker_url, tinker_key):
    tc = service.create_lora_training_client(base_model=base_model, rank=8, seed=0).result()
    data = supervised(tc.get_tokenizer())
    for _ in range(3):
        _step(tc, data)
    saved = tc.save_state("after-3").result()
    assert saved.path == f"tinker://{tc.model_id}/weights/after-3"
    at_save = _loss(tc, data)

    # weights only: the same forward loss; a fresh model id of this session, a trainer of its own
    fresh = service.create_training_client_from_state(saved.path).result()
    assert fresh.model_id != tc.model_id and fresh.model_id.startswith(tc.model_id.split(":")[0])
    assert _loss(fresh, data) == pytest.approx(at_save, abs=1e-4)
    info = fresh.get_info()
    assert info.model_data.model_name == base_model and info.lora_rank == 8
    _delete_trainer(tinker_url, tinker_key, fresh.model_id)

    # with the optimizer state: the next identical step gives what the original's next step gives
    resumed = service.create_training_client_from_state_with_optimizer(saved.path).result()
    assert _loss(resumed, data) == pytest.approx(at_save, abs=1e-4)
    _step(tc, data)
    _step(resumed, data)
    after_original = _loss(tc, data)
    assert _loss(resumed, data) == pytest.approx(after_original, abs=1e-4)
    assert abs(after_original - at_save) > 1e-3  # the step did move the loss
    _delete_trainer(tinker_url, tinker_key, resumed.model_id)

    # load_state on the model itself: back to the saved weights (with and without the optimizer)
    tc.load_state(saved.path).result()
    assert _loss(tc, data) == pytest.approx(at_save, abs=1e-4)
    _step(tc, data)
    tc.load_state_with_optimizer(saved.path).result()
    assert _loss(tc, data) == pytest.approx(at_save, abs=1e-4)
    assert _step(tc, data) == pytest.approx(at_save, abs=1e-4)
    assert _loss(tc, data) == pytest.approx(after_original, abs=1e-4)

    rest = tinker.RestClient(base_url=tinker_url, api_key=tinker_key)
    info = rest.get_weights_info_by_tinker_path(saved.path).result()
    assert info.base_model == base_model and info.is_lora and info.lora_rank == 8


@pytest.mark.filterwarnings("ignore:DEPRECATED. TrainingClient.load_state:FutureWarning")
def test_loads_of_what_holds_no_training_state_fail_naming_path(service, base_model):
    tc = service.create_lora_training_client(base_model=base_model, rank=4, seed=0).result()
    sampler_path = tc.save_weights_for_sampler("weights-only").result().path
    for path in (sampler_path, "tinker://another-session:train:0/weights/x", "tinker://no-segment"):
        with pytest.raises(RequestFailedError) as err:
            tc.load_state(path).result()
        assert err.value.category == types.RequestErrorCategory.User, err.value
        assert "path" in err.value.message
    # the model still takes requests after the failed loads
    data = supervised(tc.get_tokenizer())[:1]
    assert _loss(tc, data) > 0
