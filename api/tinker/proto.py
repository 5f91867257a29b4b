"""Tinker's protobuf messages, as the 0.38 client puts them on the wire: the `forward_backward` request
it sends (`application/x-protobuf`), and the two results it insists on reading as protobuf
(`ForwardBackwardOutput` of forward/forward_backward futures, `SampleResponse` of sampling futures).

The schema is Keel's own, built here as descriptors (no generated module, no protoc): only the field
numbers and wire types have to match the client's `tinker_public` package, and fields Keel does not
read (provenance spans, top-k, image sizes) are left out, so protobuf skips them as unknown fields.
The messages live in a private descriptor pool, apart from the client's own classes in the default one
(tests load both in one process).

`decode_forward_backward` returns the request as Keel's native forward payload (`data`, `loss_fn`,
`loss_fn_config`) plus the Tinker envelope (`model_id`, `seq_id`, `forward_only`); anything it cannot
turn into that raises `ProtoError` with the offending field's dotted path in `param`. Arrays are read
and written with the standard `array` module: tokens are int32, values float32 or int64, all
little-endian, as the client writes them.
"""

from __future__ import annotations

import math
import sys
from array import array
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from api.schemas.text import MESSAGE, NUL

PACKAGE = "keel.tinker"
DTYPE_FLOAT32, DTYPE_INT64, DTYPE_INT32 = 1, 2, 3
STOP_REASONS = {"stop": 0, "length": 1}
METRIC_REDUCTIONS = ("mean", "sum", "min", "max", "slack", "hash2", "unique")
"""The client splits every metric key at its last ':' and merges chunked results by this reduction."""

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_SCALARS = {"string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES, "int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64,
            "double": _F.TYPE_DOUBLE, "bool": _F.TYPE_BOOL, "enum": _F.TYPE_ENUM}


def _field(name: str, number: int, kind: str, *, repeated: bool = False, oneof: int | None = None) -> _F:
    """`kind`: a scalar name, `enum:<Name>`, or a message name (relative to the package)."""
    base = kind.split(":")[0]
    f = _F(name=name, number=number, label=_REPEATED if repeated else _OPTIONAL)
    if base in _SCALARS:
        f.type = _SCALARS[base]
        if base == "enum":
            f.type_name = f".{PACKAGE}.{kind.split(':')[1]}"
    else:
        f.type, f.type_name = _F.TYPE_MESSAGE, f".{PACKAGE}.{kind}"
    if oneof is not None:
        f.oneof_index = oneof
    return f


def _message(name: str, fields: list[_F], *, oneofs: tuple[str, ...] = (),
             maps: dict[str, tuple[str, str]] | None = None) -> descriptor_pb2.DescriptorProto:
    """A message; `maps`: field name -> (number as str, value kind), each a `map<string, value>`."""
    msg = descriptor_pb2.DescriptorProto(name=name, field=fields)
    msg.oneof_decl.extend(descriptor_pb2.OneofDescriptorProto(name=o) for o in oneofs)
    for map_field, (number, value) in (maps or {}).items():
        entry = "".join(part.title() for part in map_field.split("_")) + "Entry"
        nested = msg.nested_type.add(name=entry, field=[_field("key", 1, "string"), _field("value", 2, value)])
        nested.options.map_entry = True
        msg.field.append(_field(map_field, int(number), f"{name}.{entry}", repeated=True))
    return msg


def _schema() -> descriptor_pb2.FileDescriptorProto:
    schema = descriptor_pb2.FileDescriptorProto(name="keel_tinker.proto", package=PACKAGE, syntax="proto3")
    schema.enum_type.add(name="DType").value.extend(
        descriptor_pb2.EnumValueDescriptorProto(name=n, number=i)
        for i, n in enumerate(("DTYPE_UNSPECIFIED", "DTYPE_FLOAT32", "DTYPE_INT64", "DTYPE_INT32", "DTYPE_BFLOAT16")))
    schema.enum_type.add(name="StopReason").value.extend(
        descriptor_pb2.EnumValueDescriptorProto(name=f"STOP_REASON_{n.upper()}", number=i)
        for n, i in STOP_REASONS.items())
    schema.message_type.extend([
        # the request side
        _message("SparseCsr", [_field("values", 1, "bytes"), _field("crow_indices", 2, "bytes"),
                               _field("col_indices", 3, "bytes")]),
        _message("Tensor", [_field("dense", 1, "bytes", oneof=0), _field("sparse_csr", 2, "SparseCsr", oneof=0),
                            _field("dtype", 3, "enum:DType"), _field("shape", 4, "int64", repeated=True)],
                 oneofs=("encoding",)),
        _message("EncodedTextChunk", [_field("tokens", 1, "bytes")]),
        _message("ImageChunk", [_field("data", 1, "bytes"), _field("format", 2, "string")]),
        _message("DmelChunk", [_field("dmel", 1, "bytes")]),
        _message("Chunk", [_field("encoded_text", 1, "EncodedTextChunk", oneof=0),
                           _field("image", 2, "ImageChunk", oneof=0), _field("dmel", 3, "DmelChunk", oneof=0)],
                 oneofs=("chunk",)),
        _message("Datum", [_field("model_input", 1, "Chunk", repeated=True)], maps={"loss_fn_inputs": ("2", "Tensor")}),
        _message("LossConfigValue", [_field("number", 1, "double", oneof=0), _field("text", 2, "string", oneof=0)],
                 oneofs=("value",)),
        _message("ForwardBackwardRequest",
                 [_field("model_id", 1, "string"), _field("seq_id", 2, "int32"), _field("data", 3, "Datum", repeated=True),
                  _field("loss_fn", 4, "string"), _field("forward_only", 6, "bool")],
                 maps={"loss_fn_config": ("5", "double"), "loss_fn_config_v2": ("7", "LossConfigValue")}),
        # the results
        _message("BatchedTensor", [_field("data", 1, "bytes"), _field("offsets", 2, "bytes"),
                                   _field("dtype", 3, "enum:DType"), _field("trailing_shape", 4, "int64", repeated=True)]),
        _message("ArrayRecord", [_field("type_tag", 1, "string"), _field("num_datums", 3, "int64")],
                 maps={"fields": ("2", "BatchedTensor")}),
        _message("ForwardBackwardOutput",
                 [_field("loss_fn_output_type", 1, "string"), _field("loss_fn_outputs", 2, "ArrayRecord", repeated=True)],
                 maps={"metrics": ("3", "double")}),
        _message("SampledSequence", [_field("stop_reason", 1, "enum:StopReason"), _field("tokens", 2, "bytes"),
                                     _field("logprobs", 3, "bytes")]),
        _message("SampleResponse", [_field("sequences", 1, "SampledSequence", repeated=True),
                                    _field("prompt_logprobs", 2, "bytes"),
                                    _field("prompt_cache_hit_tokens", 4, "int32")]),
    ])
    return schema


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_schema())


def _cls(name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


ForwardBackwardRequestMessage = _cls("ForwardBackwardRequest")
ForwardBackwardOutputMessage = _cls("ForwardBackwardOutput")
SampleResponseMessage = _cls("SampleResponse")


class ProtoError(ValueError):
    """A request body that is not a usable `ForwardBackwardRequest`; `param` is the field's dotted path."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message, self.param = message, param


# -- arrays ------------------------------------------------------------------------------------------

_TYPECODES = {DTYPE_FLOAT32: "f", DTYPE_INT64: "q", DTYPE_INT32: "i"}


def _unpack(raw: bytes, typecode: str, param: str) -> list:
    values = array(typecode)
    if len(raw) % values.itemsize:
        raise ProtoError(f"{param}: {len(raw)} bytes are not a whole number of {values.itemsize}-byte values", param)
    values.frombytes(raw)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def _pack(values: list, typecode: str) -> bytes:
    packed = array(typecode, values)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def _tensor(msg: Any, param: str) -> list:
    """A Tensor as a flat list (1-D) or a list of rows (2-D); a CSR tensor's missing cells are 0."""
    typecode = _TYPECODES.get(msg.dtype)
    if typecode is None:
        raise ProtoError(f"{param}: unsupported dtype {msg.dtype} (float32 or int64)", param)
    shape = list(msg.shape)
    if msg.WhichOneof("encoding") == "sparse_csr":
        if len(shape) != 2:
            raise ProtoError(f"{param}: a sparse tensor needs a 2-D shape, got {shape}", param)
        values = _unpack(msg.sparse_csr.values, typecode, param)
        crow = _unpack(msg.sparse_csr.crow_indices, "q", param)
        cols = _unpack(msg.sparse_csr.col_indices, "q", param)
        rows, width = shape
        ok = (len(crow) == rows + 1 and len(cols) == len(values) and crow[0] == 0 and crow[-1] == len(values)
              and all(a <= b for a, b in pairwise(crow)) and all(0 <= c < width for c in cols))
        if not ok:
            raise ProtoError(f"{param}: inconsistent sparse CSR indices for shape {shape}", param)
        dense = [[0.0 if typecode == "f" else 0] * width for _ in range(rows)]
        for r in range(rows):
            for j in range(crow[r], crow[r + 1]):
                dense[r][cols[j]] = values[j]
        return dense
    values = _unpack(msg.dense, typecode, param)
    if not shape or len(shape) == 1:
        if shape and shape[0] != len(values):
            raise ProtoError(f"{param}: shape {shape} does not match its {len(values)} values", param)
        return values
    if len(shape) == 2 and shape[0] * shape[1] == len(values):
        return [values[i * shape[1]:(i + 1) * shape[1]] for i in range(shape[0])]
    raise ProtoError(f"{param}: shape {shape} does not match its {len(values)} values (1-D or 2-D tensors)", param)


# -- forward_backward request ----------------------------------------------------------------------

@dataclass
class ForwardBackward:
    """A decoded `forward_backward` request."""

    model_id: str
    seq_id: int
    forward_only: bool
    loss_fn: str
    loss_fn_config: dict[str, float | str] = field(default_factory=dict)
    data: list[dict[str, Any]] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        """Keel's native forward / forward_backward payload (engine.interactive.datums.parse_forward)."""
        out: dict[str, Any] = {"data": self.data, "loss_fn": self.loss_fn}
        if self.loss_fn_config:
            out["loss_fn_config"] = dict(self.loss_fn_config)
        return out


def decode_forward_backward(body: bytes) -> ForwardBackward:
    msg = ForwardBackwardRequestMessage()
    try:
        msg.ParseFromString(body)
    except DecodeError:
        raise ProtoError("the body is not a ForwardBackwardRequest protobuf message", "body") from None
    # No id, name or key holds NUL: PostgreSQL cannot store it (a 500), so it is refused at its field.
    for param, text in [("model_id", msg.model_id), ("loss_fn", msg.loss_fn),
                        *(("loss_fn_config", k) for k in (*msg.loss_fn_config, *msg.loss_fn_config_v2)),
                        *(("loss_fn_config", v.text) for v in msg.loss_fn_config_v2.values()),
                        *((f"data[{i}].loss_fn_inputs", k) for i, d in enumerate(msg.data) for k in d.loss_fn_inputs)]:
        if NUL in text:
            raise ProtoError(f"{param}: {MESSAGE}", param)
    # v2 carries every value (text ones too); the legacy float map only mirrors v2's numbers
    config: dict[str, float | str] = {k: float(v) for k, v in msg.loss_fn_config.items()}
    for key, value in msg.loss_fn_config_v2.items():
        kind = value.WhichOneof("value")
        config[key] = value.text if kind == "text" else float(value.number)
    data = []
    for i, datum in enumerate(msg.data):
        tokens: list[int] = []
        for j, chunk in enumerate(datum.model_input):
            kind = chunk.WhichOneof("chunk")
            param = f"data[{i}].model_input.chunks[{j}]"
            if kind != "encoded_text":
                raise ProtoError(f"{param}: {kind or 'empty'} chunks are not supported (only encoded_text)", param)
            tokens.extend(_unpack(chunk.encoded_text.tokens, "i", f"{param}.tokens"))
        inputs = {name: _tensor(tensor, f"data[{i}].loss_fn_inputs.{name}")
                  for name, tensor in sorted(datum.loss_fn_inputs.items())}
        data.append({"model_input": tokens, "loss_fn_inputs": inputs})
    return ForwardBackward(model_id=msg.model_id, seq_id=msg.seq_id, forward_only=msg.forward_only,
                           loss_fn=msg.loss_fn, loss_fn_config=config, data=data)


# -- results ---------------------------------------------------------------------------------------

def _check_metrics(metrics: dict[str, float]) -> dict[str, float]:
    for key in metrics:
        name, colon, reduction = key.rpartition(":")
        if not (name and colon and reduction in METRIC_REDUCTIONS):
            raise ValueError(f"metric {key!r} is not named name:reduction ({', '.join(METRIC_REDUCTIONS)})")
    return {k: float(v) for k, v in metrics.items()}


def encode_forward_backward_output(outputs: list[dict[str, list[float]]], metrics: dict[str, float]) -> bytes:
    """`outputs`: one dict per datum, the same float fields in each (`logprobs`: one per model_input token),
    as one ArrayRecord of float32 BatchedTensors (int64 byte offsets, n + 1 of them)."""
    msg = ForwardBackwardOutputMessage(loss_fn_output_type="ArrayRecord")
    msg.metrics.update(_check_metrics(metrics))
    record = msg.loss_fn_outputs.add(type_tag="ArrayRecord", num_datums=len(outputs))
    names = list(outputs[0]) if outputs else []
    for name in names:
        flat: list[float] = []
        offsets = [0]
        for i, datum in enumerate(outputs):
            if set(datum) != set(names):
                raise ValueError(f"datum {i} has fields {sorted(datum)}, datum 0 has {sorted(names)}")
            flat.extend(datum[name])
            offsets.append(4 * len(flat))
        tensor = record.fields[name]
        tensor.data, tensor.offsets, tensor.dtype = _pack(flat, "f"), _pack(offsets, "q"), DTYPE_FLOAT32
    return msg.SerializeToString()


def encode_sample_response(sequences: list[dict[str, Any]], prompt_logprobs: list[float | None] | None = None) -> bytes:
    """`sequences`: `{tokens, logprobs, stop_reason ("stop" | "length")}` each; `prompt_logprobs`: one per
    prompt token when asked for. None (the first prompt token's, or a non-finite value the database
    stored as null) travels as NaN."""
    msg = SampleResponseMessage()
    for seq in sequences:
        tokens, logprobs = list(seq["tokens"]), [math.nan if x is None else x for x in seq["logprobs"]]
        if len(tokens) != len(logprobs):
            raise ValueError(f"{len(tokens)} tokens but {len(logprobs)} logprobs")
        msg.sequences.add(stop_reason=STOP_REASONS[seq["stop_reason"]], tokens=_pack(tokens, "i"),
                          logprobs=_pack(logprobs, "f"))
    if prompt_logprobs is not None:
        msg.prompt_logprobs = _pack([math.nan if x is None else x for x in prompt_logprobs], "f")
    return msg.SerializeToString()
