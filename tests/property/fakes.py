"""An in-memory model behind the real ``Router``: scripted, adversarial decision and summary answers.

``ScriptedTransport`` answers every native decision and every JSON-mode chat call from a
:class:`Script` (drawn by hypothesis) and records what it was asked and what it answered, so a test
can compute what compaction must have done. Choices are keyed on fragment start indexes, so the
script gives the same answer whatever order the concurrent batches run in.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from compactor.jsonutil import dense_dumps
from compactor.providers.base import (
    UPSTREAM_ERROR, ChatRequest, ChatResponse, DecisionRequest, DecisionResponse, Offer, ProviderError,
)
from compactor.providers.native_decisions import checked_decision
from compactor.router import Router

# Per-fragment decision answers. "archive" is invalid (unknown_choice) when the fragment was excerpted.
ANSWER_KINDS = ("keep", "summarize", "archive", "invented", "missing", "not_dict", "wrong_type",
                "bad_confidence", "probabilities_ok", "probabilities_bad")
VALID_ANSWER_KINDS = {"keep", "summarize", "archive", "probabilities_ok"}
# Whole decision responses.
DECISION_MODES = ("answer", "extra_id", "no_model", "raise", "timeout")
# Per-id summary texts.
SUMMARY_KINDS = ("short", "evidence", "half", "empty", "blank", "unicode", "huge", "longer", "same", "number",
                 "null", "list", "omitted")
# Whole summary responses; the FAILING ones make the generate node fall back to its input.
SUMMARY_MODES = ("object", "invented_id", "empty_key", "array", "string_json", "non_json", "duplicate_keys",
                 "nan", "deep", "length", "tool_calls", "empty_text", "none_text", "raise", "timeout")
FAILING_SUMMARY_MODES = {"non_json", "duplicate_keys", "nan", "deep", "length", "tool_calls", "empty_text",
                         "none_text", "raise", "timeout"}
INVENTED_ID = "fragment_999999"

DECIDER = Offer(id="fake/decider", provider="fake", family="fake-decider", model="fake-decider-1",
                protocol="decisions", transport="fake", price_in=0.0, price_out=0.0)
WRITER = Offer(id="fake/writer", provider="fake", family="fake-writer", model="fake-writer-1",
               protocol="chat", transport="fake", price_in=0.0, price_out=0.0,
               observations={"supports_json_mode": True})


def start_of(fragment_id: str) -> int:
    return int(fragment_id.rsplit("_", 1)[1])


def pick(options: list[Any] | tuple[Any, ...], index: int) -> Any:
    return options[index % len(options)]


@dataclass
class Script:
    answer_kinds: list[str]
    decision_modes: list[str]
    summary_kinds: list[str]
    summary_modes: list[str]
    validate: bool = True  # pass answers through the decisions-transport check, as real transports do
    hang: bool = False  # never answer (for deadline tests)


@dataclass
class DecisionCall:
    ids: tuple[str, ...]
    questions: dict[str, Any]
    mode: str
    answers: dict[str, Any] | None  # what the transport returned (None when it failed)


@dataclass
class ChatCall:
    items: dict[str, str]  # the selected items it was sent
    mode: str
    value: Any  # the JSON value it answered (meaningful unless mode is failing)
    cap: int | None = None  # the per-summary byte cap the request carried (the patch overlay's too)


@dataclass
class ScriptedTransport:
    script: Script
    decisions: list[DecisionCall] = field(default_factory=list)
    chats: list[ChatCall] = field(default_factory=list)

    # -- decisions -------------------------------------------------------------------------------

    def _answer(self, kind: str, question: dict[str, Any]) -> Any:
        labels = list(question["criteria"])
        if kind in ("keep", "summarize", "archive"):
            return {"type": "choice", "choice": kind, "confidence": 0.8}
        if kind == "invented":
            return {"type": "choice", "choice": "delete_forever"}
        if kind == "not_dict":
            return "summarize"
        if kind == "wrong_type":
            return {"type": "score", "choice": "summarize"}
        if kind == "bad_confidence":
            return {"type": "choice", "choice": "summarize", "confidence": 1.5}
        if kind == "probabilities_ok":
            return {"type": "choice", "choice": "summarize",
                    "probabilities": {label: 1.0 if label == "summarize" else 0.0 for label in labels}}
        assert kind == "probabilities_bad", kind
        return {"type": "choice", "choice": "summarize", "probabilities": {label: 0.9 for label in labels}}

    async def decide(self, offer: Offer, request: DecisionRequest, timeout_s: float) -> DecisionResponse:
        if self.script.hang:
            await asyncio.sleep(3600)
        ids = tuple(request.questions)
        mode = pick(self.script.decision_modes, start_of(ids[0]))
        call = DecisionCall(ids=ids, questions=request.questions, mode=mode, answers=None)
        self.decisions.append(call)
        if mode == "raise":
            raise ProviderError(UPSTREAM_ERROR, "scripted decision failure", http_status=502)
        if mode == "timeout":
            raise TimeoutError
        answers: dict[str, Any] = {}
        for fid, question in request.questions.items():
            kind = pick(self.script.answer_kinds, start_of(fid))
            if kind != "missing":
                answers[fid] = self._answer(kind, question)
        if mode == "extra_id":
            answers[INVENTED_ID] = {"type": "choice", "choice": "archive"}
        raw = {"model": "" if mode == "no_model" else offer.model, "answers": answers}
        call.answers = answers
        if self.script.validate:
            return checked_decision(request, raw, model_family=offer.family)  # raises bad_response
        return DecisionResponse(model=raw["model"], answers=answers, tokens_in=10, tokens_out=5, cost_reported=0.0)

    # -- summaries -------------------------------------------------------------------------------

    def _summary(self, kind: str, fid: str, item: str) -> Any:
        return {
            "short": f"S{fid}",
            "evidence": f"Evidence {fid}",  # fixture T's summaries
            "empty": "",
            "blank": "   \n",
            "unicode": f"résumé 😀 \U0001F9EA 中文 {fid}",
            "huge": "h" * 20_000,
            "half": "h" * (len(item) // 2),  # shrinks, but usually over the byte budget
            "longer": item + " and more",
            "same": item,
            "number": 42,
            "null": None,
            "list": [f"S{fid}"],
        }[kind]

    async def chat(self, offer: Offer, request: ChatRequest, timeout_s: float) -> ChatResponse:
        if self.script.hang:
            await asyncio.sleep(3600)
        assert request.json_mode, "decision mode only makes JSON-mode chat calls"
        # Each item is shown as the JSON of its messages (the generate node's embed_json_text); the scripted
        # kinds below work on its text, the dense JSON the flow's item is.
        items = {fid: item if isinstance(item, str) else dense_dumps(item)
                 for fid, item in json.loads(request.messages[-1]["content"]).items()}
        first = min(start_of(fid) for fid in items)
        mode = pick(self.script.summary_modes, first)
        value: Any = {}
        for fid, item in items.items():
            kind = pick(self.script.summary_kinds, start_of(fid) // 2)
            if kind != "omitted":
                value[fid] = self._summary(kind, fid, item)
        if mode == "invented_id":
            value[INVENTED_ID] = "invented"
        elif mode == "empty_key":
            value[""] = "no id"
        elif mode == "array":
            value = list(value.values())
        elif mode == "string_json":
            value = "a summary that is not an object"
        elif mode == "deep":
            nested: Any = "x"
            for _ in range(40):
                nested = [nested]
            value = {fid: nested for fid in items}
        self.chats.append(ChatCall(items=items, mode=mode, value=value, cap=request.max_string_bytes))
        text: str | None = json.dumps(value, ensure_ascii=False)
        finish, tool_calls = "stop", None
        if mode == "non_json":
            text = "Sure! Here are the summaries: " + ", ".join(items)
        elif mode == "duplicate_keys":
            fid = next(iter(items))
            text = "{" + f'"{fid}": "one", "{fid}": "two"' + "}"
        elif mode == "nan":
            text = "{" + f'"{next(iter(items))}": NaN' + "}"
        elif mode == "length":
            finish = "length"
        elif mode == "tool_calls":
            tool_calls = [{"id": "t", "type": "function", "function": {"name": "x", "arguments": "{}"}}]
        elif mode == "empty_text":
            text = "  "
        elif mode == "none_text":
            text = None
        elif mode == "raise":
            raise ProviderError(UPSTREAM_ERROR, "scripted summary failure", http_status=500)
        elif mode == "timeout":
            raise TimeoutError
        return ChatResponse(text=text, finish_reason=finish, tool_calls=tool_calls, served_model_id=offer.model,
                            tokens_in=100, tokens_out=20, cost_reported=0.0)


def scripted_router(transport: ScriptedTransport) -> Router:
    """The real Router over one fake decider and one fake JSON-capable writer, both served by ``transport``."""
    return Router([DECIDER, WRITER], transport_for=lambda offer: transport)
