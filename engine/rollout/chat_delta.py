"""The chat template's incremental form (`ChatDelta`): the token ids a template writes for new messages
after an assistant turn, without re-rendering or re-tokenizing anything before them
(`engine.rollout.episodes` explains where it is used).

How (verl does the same with a base chat history): render a fixed base conversation that ends with an
assistant turn, with and without the new messages (the second with the generation prompt), and take the
difference of the two texts; only that difference is tokenized (`add_special_tokens=False`). What the
template writes after an assistant's content (the demo template: `<|eos|>\n`; Qwen's: `<|im_end|>\n`)
is split by how the turn ended:
- its last sampled token is how that text begins (the EOS, or another special token such as `<|im_end|>`):
  the rest of the text after it (`\n`) leads the delta;
- it was cut without one (or stopped at an EOS the template does not write there): the whole end-of-turn
  text leads it (the loop appends it as the environment's tokens: the policy did not choose to stop).
"""

from __future__ import annotations

from typing import Any

from engine.errors import EngineError

_SENTINEL = "\x00keel-turn\x00"
_BASE: list[dict[str, Any]] = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": _SENTINEL}]


class ChatDelta:
    """The chat template's incremental form: token ids of new messages after an assistant turn (see the
    module doc), from one tokenizer's template."""

    def __init__(self, tokenizer: Any, eos_ids: set[int]) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise EngineError("multi-turn episodes need a tokenizer with a chat template (to render the "
                              "environment's messages)", code="invalid_model")
        self.tokenizer = tokenizer
        self.eos_ids = eos_ids
        self.special_ids = set(getattr(tokenizer, "all_special_ids", None) or ())
        self.base = self.render(_BASE, generation_prompt=False)
        at = self.base.rfind(_SENTINEL)
        if at < 0:
            raise EngineError("the chat template drops the assistant's content", code="invalid_model")
        self.end_of_turn = self.base[at + len(_SENTINEL):]
        """What the template writes after an assistant's content (the demo's `<|eos|>\\n`)."""

    def render(self, messages: list[dict[str, Any]], *, generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=generation_prompt)
        except Exception as e:  # a template that refuses a role (no `tool` turns, roles must alternate)
            roles = ", ".join(str(m.get("role")) for m in messages)
            raise EngineError(f"the chat template cannot render the messages ({roles}): {e}",
                              code="invalid_model") from e

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def closing(self, last_token: int) -> str:
        """The end-of-turn text still to write after a turn whose last sampled token is `last_token`: the
        rest after it when that token (an EOS, or another special token such as Qwen's `<|im_end|>` when the
        tokenizer's EOS is `<|endoftext|>`) is how the template's end-of-turn text begins; else all of it."""
        if last_token in self.eos_ids or last_token in self.special_ids:
            text = self.tokenizer.decode([last_token], skip_special_tokens=False)
            if text and self.end_of_turn.startswith(text):
                return self.end_of_turn[len(text):]
        return self.end_of_turn

    def after_turn(self, last_token: int, messages: list[dict[str, Any]]) -> list[int]:
        """Ids to append after a turn ending in `last_token`: the rest of its end-of-turn, `messages`, and
        the next generation prompt."""
        return self.encode(self.closing(last_token) + self.messages_text(messages))

    def messages_text(self, messages: list[dict[str, Any]]) -> str:
        """`messages` and the generation prompt as the template writes them after an assistant turn's end.
        Rendered after the base conversation that ends with an assistant turn; a template that renders that
        turn differently once messages follow it (Qwen3 drops the empty `<think>` block of an assistant turn
        that is no longer the last) is continued from the base's user message alone instead."""
        text = self._difference(_BASE, self.base, messages)
        if text is None:
            text = self._difference(_BASE[:1], self.render(_BASE[:1], generation_prompt=False), messages)
        if text is None:
            raise EngineError("the chat template renders earlier messages differently once new ones follow: "
                              "multi-turn episodes cannot extend it token by token", code="invalid_model")
        return text

    def _difference(self, base: list[dict[str, Any]], base_text: str, messages: list[dict[str, Any]]) -> str | None:
        full = self.render(base + list(messages), generation_prompt=True)
        return full[len(base_text):] if full.startswith(base_text) else None

    def prompt_with(self, prompt: list[int], conversation: list[dict[str, Any]],
                    messages: list[dict[str, Any]]) -> list[int]:
        """The prompt with an environment's first messages after the conversation and then the generation
        prompt: the given prompt's ids are kept, its generation prompt (the template's, when the prompt ends
        with exactly those ids) replaced by the messages' rendering; else the whole is rendered anew."""
        if conversation:
            plain = self.render(conversation, generation_prompt=False)
            with_prompt = self.render(conversation, generation_prompt=True)
            tail = self.encode(with_prompt[len(plain):]) if with_prompt.startswith(plain) else []
            text = self._difference(conversation, plain, messages)
            if tail and prompt[-len(tail):] == tail and text is not None:
                return prompt[:-len(tail)] + self.encode(text)
        return self.encode(self.render(conversation + list(messages), generation_prompt=True))
