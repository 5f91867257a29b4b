"""api.tinker.proto against the official client's own codec: requests the `tinker` 0.38 client encodes
decode into Keel's forward payload, and the results Keel encodes decode with the client's
`response_conv` into the values that went in."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tinker import types
from tinker.proto import response_conv
from tinker.proto.request_conv import forward_backward_request_to_proto

from api.tinker import proto


def _wire(data: list[types.Datum], loss_fn: str = "cross_entropy", config: dict | None = None, seq_id: int = 1,
          forward_only: bool = False) -> bytes:
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=data, loss_fn=loss_fn, loss_fn_config=config),
        model_id="sess-1:train:0", seq_id=seq_id)
    message = forward_backward_request_to_proto(request)
    message.forward_only = forward_only  # the client's resource layer sets it so for `forward`
    return message.SerializeToString()


def _datum(tokens: list[int], **inputs: types.TensorData) -> types.Datum:
    return types.Datum(model_input=types.ModelInput.from_ints(tokens), loss_fn_inputs=inputs)


def test_a_cross_entropy_request_decodes_into_the_native_payload():
    data = [_datum([1, 2, 3], target_tokens=types.TensorData(data=[2, 3, 4], dtype="int64"),
                   weights=types.TensorData(data=[0.0, 1.0, -0.5], dtype="float32")),
            _datum([7, 300000], target_tokens=types.TensorData(data=[8, 9], dtype="int64"),
                   weights=types.TensorData(data=[1.0, 1.0], dtype="float32"))]
    decoded = proto.decode_forward_backward(_wire(data, seq_id=7, forward_only=True))
    assert (decoded.model_id, decoded.seq_id, decoded.forward_only, decoded.loss_fn) == (
        "sess-1:train:0", 7, True, "cross_entropy")
    assert decoded.payload() == {"loss_fn": "cross_entropy", "data": [
        {"model_input": [1, 2, 3], "loss_fn_inputs": {"target_tokens": [2, 3, 4], "weights": [0.0, 1.0, -0.5]}},
        {"model_input": [7, 300000], "loss_fn_inputs": {"target_tokens": [8, 9], "weights": [1.0, 1.0]}}]}
    assert proto.decode_forward_backward(_wire(data)).forward_only is False


def test_chunks_concatenate_and_both_config_maps_are_read():
    model_input = types.ModelInput(chunks=[types.EncodedTextChunk(tokens=[5, 6]), types.EncodedTextChunk(tokens=[7])])
    datum = types.Datum(model_input=model_input, loss_fn_inputs={
        "target_tokens": types.TensorData(data=[6, 7, 8], dtype="int64"),
        "logprobs": types.TensorData(data=[-1.25, -2.5, -0.125], dtype="float32"),
        "advantages": types.TensorData(data=[0.5, -1.0, 2.0], dtype="float32")})
    decoded = proto.decode_forward_backward(
        _wire([datum], "ppo", {"clip_low_threshold": 0.7, "clip_high_threshold": 1.3, "mode": "token"}))
    assert decoded.data[0]["model_input"] == [5, 6, 7]
    assert decoded.data[0]["loss_fn_inputs"]["logprobs"] == [-1.25, -2.5, -0.125]
    # text values travel in loss_fn_config_v2 only; numbers in both maps
    assert decoded.loss_fn_config == {"clip_low_threshold": pytest.approx(0.7), "clip_high_threshold":
                                      pytest.approx(1.3), "mode": "token"}
    assert decoded.payload()["loss_fn_config"] == decoded.loss_fn_config


def test_a_sparse_csr_tensor_is_made_dense():
    torch = pytest.importorskip("torch")
    dense = torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.5], [0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]])
    sparse = types.TensorData.from_torch_sparse(dense)
    assert sparse.sparse_crow_indices is not None  # the client chose CSR for it
    decoded = proto.decode_forward_backward(_wire([_datum([1, 2, 3], table=sparse)]))
    assert decoded.data[0]["loss_fn_inputs"]["table"] == dense.tolist()


def test_a_dense_2d_tensor_keeps_its_rows():
    table = types.TensorData.from_numpy(np.arange(6, dtype=np.int64).reshape(2, 3))
    decoded = proto.decode_forward_backward(_wire([_datum([1, 2], table=table)]))
    assert decoded.data[0]["loss_fn_inputs"]["table"] == [[0, 1, 2], [3, 4, 5]]


def test_bad_bodies_name_the_field():
    with pytest.raises(proto.ProtoError) as err:
        proto.decode_forward_backward(b"\xff\xff\xff")
    assert err.value.param == "body"

    message = proto.ForwardBackwardRequestMessage(model_id="m", seq_id=1, loss_fn="cross_entropy")
    message.data.add().model_input.add().encoded_text.tokens = b"\x01\x00\x00"  # 3 bytes: not int32s
    with pytest.raises(proto.ProtoError) as err:
        proto.decode_forward_backward(message.SerializeToString())
    assert err.value.param == "data[0].model_input.chunks[0].tokens"

    image = types.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=4)
    datum = types.Datum(model_input=types.ModelInput(chunks=[types.EncodedTextChunk(tokens=[1]), image]),
                        loss_fn_inputs={})
    with pytest.raises(proto.ProtoError) as err:
        proto.decode_forward_backward(_wire([datum]))
    assert err.value.param == "data[0].model_input.chunks[1]" and "image" in err.value.message

    message = proto.ForwardBackwardRequestMessage(model_id="m", seq_id=1, loss_fn="cross_entropy")
    tensor = message.data.add().loss_fn_inputs["weights"]
    tensor.dtype, tensor.dense = proto.DTYPE_FLOAT32, b"\x00" * 8
    tensor.shape.append(3)
    with pytest.raises(proto.ProtoError) as err:
        proto.decode_forward_backward(message.SerializeToString())
    assert err.value.param == "data[0].loss_fn_inputs.weights"


def test_forward_backward_output_decodes_in_the_client():
    logprobs = [[-1.5, -0.25, -3.0], [-0.75]]
    body = proto.encode_forward_backward_output([{"logprobs": x} for x in logprobs],
                                                {"loss:sum": 5.5, "tokens:sum": 4.0})
    out = response_conv.deserialize_forward_backward_output(body)
    assert out.metrics == {"loss:sum": 5.5, "tokens:sum": 4.0}
    assert [o["logprobs"].tolist() for o in out.loss_fn_outputs] == logprobs
    assert [o["logprobs"].shape for o in out.loss_fn_outputs] == [[3], [1]]
    assert out.loss_fn_output_type == "ArrayRecord"


def test_metric_keys_must_carry_a_reduction():
    for key in ("loss", "loss:average", ":sum"):
        with pytest.raises(ValueError, match="name:reduction"):
            proto.encode_forward_backward_output([], {key: 1.0})


def test_sample_response_decodes_in_the_client():
    body = proto.encode_sample_response(
        [{"tokens": [11, 12, 13], "logprobs": [-0.5, -1.0, -2.0], "stop_reason": "stop"},
         {"tokens": [14], "logprobs": [-0.125], "stop_reason": "length"}],
        prompt_logprobs=[None, -3.5, -0.25])
    out = response_conv.deserialize_sample_response(body)
    assert [s.tokens for s in out.sequences] == [[11, 12, 13], [14]]
    assert [s.logprobs for s in out.sequences] == [[-0.5, -1.0, -2.0], [-0.125]]
    assert [s.stop_reason for s in out.sequences] == ["stop", "length"]
    assert math.isnan(out.prompt_logprobs_np[0])  # NaN on the wire, None in the client's list
    assert out.prompt_logprobs == [None, -3.5, -0.25]

    without = response_conv.deserialize_sample_response(proto.encode_sample_response(
        [{"tokens": [1, 2], "logprobs": [-1.0, None], "stop_reason": "length"}]))
    assert without.prompt_logprobs is None
    assert without.sequences[0].logprobs[0] == -1.0 and math.isnan(without.sequences[0].logprobs[1])
