"""The registry of compaction modes: one name per mode, used by the API, the CLI and the S3 path."""

from __future__ import annotations

import importlib

import pytest
from pydantic import ValidationError

from compactor.compaction import modes
from compactor.models import CompactRequest
from compactor_cli.main import build_parser

MESSAGES = [{"role": "user", "content": "x"}]


def test_each_registered_module_is_its_mode() -> None:
    assert modes.names() == ("decision", "mask", "seal")
    for name, module in modes.REGISTRY.items():
        mode = modes.get(name)
        assert mode is importlib.import_module(module).MODE and mode.name == name
        assert all(callable(getattr(mode, step)) for step in ("prepare", "run", "report"))


@pytest.mark.parametrize(("fields", "mode"), [
    ({}, "seal"), ({"decision_policy_ir": None}, "seal"), ({"decision_policy_ir": ["x"]}, "decision"),
    ({"mode": "mask", "decision_policy_ir": ["x"]}, "mask"), ({"mode": "seal", "decision_policy_ir": ["x"]}, "seal"),
    ({"mode": "decision"}, "decision"),
])
def test_mode_is_named_or_inferred_as_before(fields: dict, mode: str) -> None:
    assert CompactRequest.model_validate({"messages": MESSAGES, **fields}).mode_name == mode


def test_unknown_mode_lists_the_valid_names() -> None:
    with pytest.raises(ValidationError, match="mode must be one of: decision, mask, seal"):
        CompactRequest.model_validate({"messages": MESSAGES, "mode": "legacy"})


def test_cli_mode_choices_come_from_the_registry() -> None:
    parser = build_parser()
    compact = parser._subparsers._group_actions[0].choices["compact"]  # noqa: SLF001 - argparse has no accessor
    (action,) = [a for a in compact._actions if a.dest == "mode"]  # noqa: SLF001
    assert tuple(action.choices) == modes.names() and action.default is None


def test_mask_through_the_api(compact_module) -> None:
    from compactor_cli.lambda_runtime import LocalLambdaContext
    from unit.api.helpers import load_event, response_json

    from .test_mask import MESSAGES as TOOL_MESSAGES

    context = LocalLambdaContext("CompactFunction", timeout_s=60)
    response = compact_module.handler(load_event("compact-legacy", body={
        "messages": TOOL_MESSAGES, "keep_recent": 2, "mode": "mask"}), context)
    body = response_json(response)
    assert response["statusCode"] == 200 and body["compaction"]["mode"] == "mask"
    assert [m["index"] for m in body["compaction"]["masked"]] == [3]
    response = compact_module.handler(load_event("compact-legacy", body={"messages": TOOL_MESSAGES,
                                                                         "mode": "nope"}), context)
    assert response["statusCode"] == 422
    (item,) = response_json(response)["detail"]
    assert item["loc"] == ["body", "mode"] and "decision, mask, seal" in item["msg"]


def test_cli_infers_a_request_body_like_the_api(tmp_path, capsys) -> None:
    import json

    from compactor_cli.main import main

    from .test_mask import MESSAGES as TOOL_MESSAGES

    body_file, bare_file, out = tmp_path / "body.json", tmp_path / "bare.json", tmp_path / "out.json"
    body_file.write_text(json.dumps({"messages": TOOL_MESSAGES, "keep_recent": 2}))
    bare_file.write_text(json.dumps(TOOL_MESSAGES))
    assert main(["compact", str(body_file), "--json", "-q", "-o", str(out)]) == 0
    assert "compaction" not in json.loads(out.read_text())  # no decision_policy_ir: seal, as the API
    assert main(["compact", str(bare_file), "--json", "-q", "-o", str(out)]) == 0
    assert "fragments" in json.loads(out.read_text())["compaction"]  # a bare transcript: decision
    assert main(["compact", str(body_file), "--mode", "mask", "--json", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["compaction"]["mode"] == "mask"
    assert "mask: compacted" in capsys.readouterr().err
