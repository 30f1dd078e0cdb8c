"""One home for JSON nested too deep: every reader that may be handed it reads through ``jsonutil.loads_within``,
which turns the parser's ``RecursionError`` (and nesting past a reader's bound) into ``NestedTooDeep``, a
``ValueError`` with one wording (docs/reliability.md)."""

from __future__ import annotations

import pytest

from compactor.jsonutil import (
    JSONLimitError, NestedTooDeep, StrictJSONError, bounded_loads, embedded_json, loads_within, strict_loads,
)

PAST_THE_PARSER = "[" * 100_000  # json.loads raises RecursionError, not ValueError
PAST_THE_BOUND = "[" * 200 + "]" * 200  # parsed, then deeper than the bodies' 128 levels


@pytest.mark.parametrize("text", [PAST_THE_PARSER, PAST_THE_PARSER.encode(), PAST_THE_BOUND])
def test_every_json_reader_refuses_the_same_deep_input_with_the_same_error(text: str | bytes) -> None:
    bounded = "JSON nested deeper than 128 levels"
    with pytest.raises(NestedTooDeep, match=bounded):
        loads_within(text, max_depth=128)
    with pytest.raises(JSONLimitError, match=bounded):
        bounded_loads(text)
    assert embedded_json(text if isinstance(text, str) else text.decode()) == (False, None)
    if text is not PAST_THE_BOUND:  # the readers bounded by the parser alone
        unbounded = "JSON nested deeper than the parser reads"
        with pytest.raises(NestedTooDeep, match=unbounded):
            loads_within(text)
        with pytest.raises(StrictJSONError, match=unbounded):  # was Python's "maximum recursion depth exceeded ..."
            strict_loads(text)
    else:
        assert loads_within(text) == strict_loads(text)


def test_the_providers_error_bodies_read_through_the_same_home() -> None:
    from compactor.providers import http
    from compactor_aws import bedrock

    deep = PAST_THE_PARSER.encode()
    assert http._parsed_or_none(deep) is None and http._parsed_or_none(b'{"a": 1}') == {"a": 1}
    assert bedrock._readable_error_body(deep) == bedrock._UNREADABLE_ERROR_BODY
    assert bedrock._readable_error_body(b"<html>not JSON</html>") == b"<html>not JSON</html>"
