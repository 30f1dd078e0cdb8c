"""A flow body whose JSON repeats a key in one object is refused, as every body is
(docs/behaviour.md#requests-and-responses): a JSON reader keeps the last value of a repeated key, so a second node
under one id, or an option given twice, used to vanish and the flow that ran was not the one sent. Until every body was read that way the flow routes
looked for it in a second parse of the body and answered 400 invalid_flow; it is now the 422 json_invalid of any
route."""

from __future__ import annotations

import base64
import json
from types import ModuleType

import pytest

from compactor.jsonutil import JSONLimitError, bounded_loads
from compactor_cli.lambda_runtime import LocalLambdaContext

from .helpers import load_event, response_json

POLICY = ["policy", ["and", ["meets_req"], ["not", ["is", "disabled"]]], ["neg", ["field", "price_in"]],
          ["top_k", 4, ["argmax"]], ["id"], ["always", {"action": "next_candidate"}]]
LLM = json.dumps({"kind": "llm", "inputs": ["i"], "system": "Answer.", "policy": POLICY})
TWO_NODES_ONE_ID = ('{"flow_ir": ["flow", {"i": {"kind": "input"}, "a": ' + LLM + ', '
                    '"a": {"kind": "data", "operation": "union", "inputs": ["i"]}, '
                    '"o": {"kind": "output", "inputs": ["a"]}}], "flow_input": {"x": "y"}}')
OPTION_TWICE = ('{"flow_ir": ["flow", {"i": {"kind": "input"}, '
                '"o": {"kind": "output", "inputs": ["i"], "inputs": ["i"]}}]}')
INPUT_KEY_TWICE = ('{"flow_ir": ["flow", {"i": {"kind": "input"}, "o": {"kind": "output", "inputs": ["i"]}}], '
                   '"flow_input": {"t1": "first ticket", "t1": "second ticket"}}')


@pytest.mark.parametrize(("path", "raw", "key"), [
    ("/flows", TWO_NODES_ONE_ID, "a"),
    ("/flows", OPTION_TWICE, "inputs"),
    ("/flows", INPUT_KEY_TWICE, "t1"),
    ("/flows/normalize", TWO_NODES_ONE_ID, "a"),
])
@pytest.mark.usefixtures("bundled_catalog")
def test_a_repeated_key_is_422_json_invalid_naming_it(compact_module: ModuleType,
                                                      lambda_context: LocalLambdaContext,
                                                      path: str, raw: str, key: str) -> None:
    response = compact_module.handler(load_event("flows", raw_body=raw, path=path), lambda_context)

    assert response["statusCode"] == 422
    [item] = response_json(response)["detail"]
    assert item["type"] == "json_invalid" and item["loc"][0] == "body"
    assert item["ctx"]["error"] == f'the key "{key}" appears twice in one object: send each key once'


@pytest.mark.usefixtures("bundled_catalog")
def test_a_base64_body_is_read_the_same_way(compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    event = load_event("flows", base64_body=TWO_NODES_ONE_ID.encode("utf-8"))

    assert compact_module.handler(event, lambda_context)["statusCode"] == 422


@pytest.mark.usefixtures("bundled_catalog")
def test_the_same_flow_without_repeats_runs(compact_module: ModuleType, lambda_context: LocalLambdaContext) -> None:
    raw = TWO_NODES_ONE_ID.replace('"a": ' + LLM + ", ", "")

    response = compact_module.handler(load_event("flows", raw_body=raw), lambda_context)

    assert response["statusCode"] == 200
    assert response_json(response)["output"] == {"x": "y"}


@pytest.mark.parametrize(("text", "key"), [
    ('{"a": 1, "b": {"c": 2, "c": 3}}', "c"), ('[{"a": 1}, {"a": 2}]', None), ('{"a": {"a": 1}}', None),
    ('"not an object"', None), ('{"x": 1, "x": 1}', "x"),
])
def test_bounded_loads_names_a_repeated_key(text: str, key: str | None) -> None:
    if key is None:
        bounded_loads(text)
        return
    with pytest.raises(JSONLimitError) as refused:
        bounded_loads(text)
    assert refused.value.msg == f'the key "{key}" appears twice in one object: send each key once'
    assert not refused.value.syntax  # JSON over a limit: a transcript file is not read again as JSONL
