"""``jsonutil.strict_loads_utf8`` and ``utf8_safe``: what a provider sends reaches an answer only as text UTF-8 can
carry (docs/reliability.md "Bounded answers")."""

from __future__ import annotations

import json

import pytest

from compactor.jsonutil import StrictJSONError, strict_loads_utf8, utf8_safe


@pytest.mark.parametrize("data", [
    b'{"a": "caf\xc3\xa9 \xf0\x9f\x98\x80"}', '{"a": "café 😀"}', b'\xef\xbb\xbf{"a": 1}',
    json.dumps({"a": "café 😀"}).encode(),  # a surrogate pair escaped: one character, fine
    b'{"a": "\\\\ud800"}',  # an escaped backslash, then text
])
def test_utf8_json_text_is_read(data: str | bytes) -> None:
    raw = data.decode("utf-8-sig") if isinstance(data, bytes) else data
    assert strict_loads_utf8(data) == json.loads(raw)


@pytest.mark.parametrize(("data", "message"), [
    (b'{"a": "x\xed\xa0\x80y"}', "not UTF-8 text"),  # a surrogate encoded as UTF-8: json.loads took it
    (b'{"a": "\xff"}', "not UTF-8 text"),
    ('{"a": "x\ud800"}', "lone surrogate"),
    (b'{"a": "x\\ud800y"}', "lone surrogate"),
    (b'{"\\udfff": 1}', "lone surrogate"),
    (b'{"a": [{"b": "\\uDBFF"}]}', "lone surrogate"),
    (b'{"a": 1, "a": 2}', "duplicate"),
])
def test_text_utf8_cannot_carry_is_refused(data: str | bytes, message: str) -> None:
    with pytest.raises(StrictJSONError, match=message):
        strict_loads_utf8(data)


def test_utf8_safe_replaces_only_lone_surrogates() -> None:
    assert utf8_safe("plain") == "plain"
    assert utf8_safe("café 😀") == "café 😀"
    assert utf8_safe("boom x\ud800y") == "boom x?y"
