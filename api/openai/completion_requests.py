"""OpenAI's chat completions and completions requests as the official `openai` client sends them, and
the fields Keel adds through `extra_body` (`return_token_ids`, `trajectory_id`). A field Keel does not
support is refused naming it (400 `unknown_parameter`), never ignored: a caller relying on it would
get a silently different answer. Limits that depend on the deployment (`n`, `max_tokens`) are checked
by the route (api/openai/inference.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.schemas.text import NulFree

_MAX_STOPS = 4
"""OpenAI's own limit on `stop` strings."""


class _Strict(NulFree):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    # Message parts pass to the model's chat template as they come (agent frameworks send extra members).
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Strict):
    include_usage: bool = False


class FunctionDef(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    description: Annotated[str, Field(max_length=10_000)] | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(_Strict):
    name: str


class ToolChoiceFunction(_Strict):
    type: Literal["function"] = "function"
    function: NamedFunction


class ResponseFormat(_Strict):
    type: Literal["text", "json_object"]
    """`json_object` is best effort: the model is asked as it is, nothing constrains its tokens
    (docs/inference.md). `json_schema` is refused."""


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts(cls, value):
        # Keel's models read text: an image or audio part would be dropped by the template.
        for part in value if isinstance(value, list) else ():
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ValueError("only text content parts ({'type': 'text', 'text': ...}) are supported")
        return value


Stop = str | Annotated[list[str], Field(min_length=1, max_length=_MAX_STOPS)] | None
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
Count = Annotated[int, Field(ge=1)]
Penalty = Annotated[float, Field(ge=0.0, le=0.0)]
"""Frequency / presence penalties: accepted only as 0 (their default), which agent frameworks send."""


class _Sampling(_Strict):
    """What both endpoints share."""

    model: Annotated[str, Field(min_length=1, max_length=1000)]
    max_tokens: Count | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: Count = 1
    stop: Stop = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    frequency_penalty: Penalty | None = None
    presence_penalty: Penalty | None = None
    user: Annotated[str, Field(max_length=256)] | None = None
    """Accepted for compatibility; not stored."""
    return_token_ids: bool = False
    """Keel's (`extra_body`): the prompt's and each choice's token ids in the answer."""
    trajectory_id: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    """Keel's (`extra_body`): record the call's token ids and log-probs under this name (core/trajectories.py)."""

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, value):
        if value == "" or (isinstance(value, list) and any(s == "" for s in value)):
            raise ValueError("a stop string must not be empty")
        return value


class ChatCompletionCreate(_Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Count | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: Annotated[list[Tool], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceFunction | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None

    def generation_cap(self) -> tuple[int | None, str]:
        """The most tokens asked for and the field that asked (`max_completion_tokens` wins, as at OpenAI)."""
        if self.max_completion_tokens is not None:
            return self.max_completion_tokens, "max_completion_tokens"
        return self.max_tokens, "max_tokens"


class CompletionCreate(_Sampling):
    prompt: Annotated[str, Field(min_length=1)] | Annotated[list[int], Field(min_length=1)]
    """One prompt: a string, or its token ids."""
    max_tokens: Count | None = 16
    """OpenAI's default for completions."""
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None

    def generation_cap(self) -> tuple[int | None, str]:
        return self.max_tokens, "max_tokens"
