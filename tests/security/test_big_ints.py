"""Issue 27, item 9: a JSON Lines value with an integer over Python's digit limit (4,300) is a 422
naming its line on every JSON Lines purpose (it was a 500 and a reset connection)."""

from __future__ import annotations

import pytest
from security_support import api_files

HUGE = "9" * 5000

FIRST_LINE = {
    "sft": b'{"prompt": "p", "response": "r"}\n',
    "prompts": b'{"prompt": "p"}\n',
    "fine-tune": b'{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}\n',
}


@pytest.mark.parametrize("purpose", sorted(FIRST_LINE))
def test_an_integer_past_the_digit_limit_is_a_422_naming_its_line(client, auth, purpose):
    data = FIRST_LINE[purpose] + b'{"prompt": "p", "response": "r", "n": ' + HUGE.encode() + b"}\n"
    r = api_files().upload(client, auth, data, purpose=purpose, filename="big.jsonl")
    assert r.status_code in (400, 422), r.text  # (400: the OpenAI-compatible purpose's status for a 422)
    assert "line 2" in r.json()["detail"].lower(), r.text
