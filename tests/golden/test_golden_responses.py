"""Responses of the existing modes (``seal`` and ``decision``, built-in offers, default settings) on every
transcript of ``tests/fixtures/corpus`` are byte-identical to the stored golden bodies, and so are the
error bodies of the front door. The goldens were generated once from the code before the structural
refactor (issue 8); they must never be regenerated to make a change pass. Only ``latency_ms`` values
are volatile and are normalised before comparing.

One golden was rewritten by a deliberate change of behaviour, not to make a change pass: ``error.wrong_method``
(``GET /compact``) was the 404 ``no route for GET /compact`` and is the 405 ``method_not_allowed`` since a method
a path has no route for is answered 405 with ``Allow`` (docs/behaviour.md#errors). And ``error.invalid_decision_policy``
named a node of the flow decision mode builds (``node "batch_0_classify": policy rejected: …``) and names the request
field since a refused ``decision_policy_ir`` or ``policy_ir`` is named as sent (``decision_policy_ir: …``,
docs/behaviour.md#errors); the rest of its body is unchanged. ``error.not_found`` and ``error.wrong_method`` named the
event's path, which lacks the stage on the execute-api URL (``no route for POST /nowhere`` for a call to
``/v1/nowhere``), and name the path the caller sent (``requestContext.path``) since: ``/v1/nowhere``, ``/v1/compact``.

To add a NEW case (never to change an existing one): ``python tests/golden/test_golden_responses.py``
writes the missing goldens and leaves the existing ones alone.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "bodies"
CORPUS = REPO / "tests" / "fixtures" / "corpus"
FILES = sorted(CORPUS.glob("*.json")) + sorted(CORPUS.glob("*.jsonl"))
_LATENCY = re.compile(r'"latency_ms":\d+')
_ENV = ("COMPACTOR_CATALOG", "COMPACT_AT_TOKENS", "FLOW_BUDGET_MS")


def normalised(body: str) -> bytes:
    return _LATENCY.sub('"latency_ms":0', body).encode("utf-8")


def _decision_policy() -> Any:
    from compactor.compaction.preset import load_preset

    return load_preset()["flow"][1]["classify"]["policy"]


def _messages(path: Path) -> list[dict[str, Any]]:
    from compactor.transcripts import parse_transcript

    return parse_transcript(path.read_text(encoding="utf-8"))[0]


def corpus_cases() -> list[tuple[str, str, Path]]:
    return [(f"{path.stem}.{mode}", mode, path) for path in FILES for mode in ("seal", "decision")]


def corpus_body(mode: str, path: Path) -> dict[str, Any]:
    messages = _messages(path)
    return {"messages": messages} if mode == "seal" else {"messages": messages,
                                                         "decision_policy_ir": _decision_policy()}


_TWO = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}] * 4
ERROR_CASES: dict[str, dict[str, Any]] = {  # name -> (method, path, raw body)
    "not_found": {"method": "POST", "path": "/nowhere", "raw": "{}"},
    "too_large": {"method": "POST", "path": "/compact", "raw": "x" * (10 * 1024 * 1024 + 1)},
    "malformed_json": {"method": "POST", "path": "/compact", "raw": "{not json"},
    "missing_messages": {"method": "POST", "path": "/compact", "raw": json.dumps({"keep_recent": 2})},
    "invalid_policy": {"method": "POST", "path": "/compact",
                       "raw": json.dumps({"messages": _TWO, "keep_recent": 2, "policy_ir": ["nonsense"]})},
    "bad_pins": {"method": "POST", "path": "/compact",
                 "raw": json.dumps({"messages": _TWO, "pinned_indices": [99], "decision_policy_ir": ["x"]})},
    "invalid_decision_policy": {"method": "POST", "path": "/compact",
                                "raw": json.dumps({"messages": _TWO * 3, "keep_recent": 1,
                                                   "decision_policy_ir": ["nonsense"]})},
    "invalid_flow": {"method": "POST", "path": "/flows", "raw": json.dumps({"flow_ir": ["nonsense"]})},
    "invalid_flow_normalize": {"method": "POST", "path": "/flows/normalize",
                               "raw": json.dumps({"flow_ir": {"x": 1}})},
    "wrong_method": {"method": "GET", "path": "/compact", "raw": ""},
}


def invoke(module: ModuleType, *, method: str, path: str, raw: str) -> dict[str, Any]:
    from compactor_cli.lambda_runtime import LocalLambdaContext
    from unit.api.helpers import load_event

    event = load_event("compact-legacy", raw_body=raw, path=path, method=method)
    return module.handler(event, LocalLambdaContext("CompactFunction", timeout_s=60))


def golden_text(response: dict[str, Any]) -> bytes:
    return json.dumps(response["statusCode"]).encode() + b"\n" + normalised(response["body"])


def golden_path(name: str) -> Path:
    return GOLDEN / f"{name}.txt.gz"


@pytest.fixture
def handler_module(compact_module: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    from compactor import catalog, container

    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    container.reset_router()
    catalog.reset_catalog_cache()
    yield compact_module
    container.reset_router()


def assert_same(name: str, actual: bytes) -> None:
    expected = gzip.decompress(golden_path(name).read_bytes())
    if actual != expected:
        at = next((i for i, (a, b) in enumerate(zip(actual, expected)) if a != b), min(len(actual), len(expected)))
        pytest.fail(f"{name}: body differs from the golden at byte {at} (sizes {len(actual)} vs {len(expected)}):\n"
                    f"  now:    {actual[max(0, at - 120):at + 120]!r}\n  golden: {expected[max(0, at - 120):at + 120]!r}")


@pytest.mark.parametrize("name,mode,path", corpus_cases(), ids=[case[0][:60] for case in corpus_cases()])
def test_corpus_responses_are_byte_identical(handler_module: ModuleType, name: str, mode: str, path: Path) -> None:
    response = invoke(handler_module, method="POST", path="/compact", raw=json.dumps(corpus_body(mode, path)))
    assert response["statusCode"] == 200
    assert_same(name, golden_text(response))


@pytest.mark.parametrize("name", sorted(ERROR_CASES))
def test_error_responses_are_byte_identical(handler_module: ModuleType, name: str) -> None:
    response = invoke(handler_module, **ERROR_CASES[name])
    assert response["statusCode"] >= 400
    assert_same(f"error.{name}", golden_text(response))


def test_every_corpus_file_has_goldens() -> None:
    assert len(FILES) == 10
    assert all(golden_path(name).is_file() for name, _, _ in corpus_cases())


def _write_missing() -> None:  # pragma: no cover - run by hand only, for NEW cases
    from compactor_cli.lambda_runtime import load_handler

    load_handler(REPO / "functions" / "compact", "compact.handler")
    module = sys.modules["compact"]
    GOLDEN.mkdir(exist_ok=True)
    cases = [(name, {"method": "POST", "path": "/compact", "raw": json.dumps(corpus_body(mode, path))})
             for name, mode, path in corpus_cases()]
    cases += [(f"error.{name}", case) for name, case in ERROR_CASES.items()]
    for name, case in cases:
        if not golden_path(name).exists():
            golden_path(name).write_bytes(gzip.compress(golden_text(invoke(module, **case)), mtime=0))
            print("wrote", golden_path(name).relative_to(REPO), file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.path[:0] = [str(REPO), str(REPO / "tests")]
    for variable in _ENV:
        import os

        os.environ.pop(variable, None)
    _write_missing()
