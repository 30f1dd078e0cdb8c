"""Invariants of a decision-mode ``/v1/compact`` body, written independently of the code under test.

Shared by the property tests (generated transcripts, adversarial models) and the corpus tests (real
transcripts, built-in offers). Everything here is recomputed from docs/behaviour.md (Requests and responses,
decision mode), plus the documented difference of docs/differences.md (a text agent's observation is
not pinned by default); nothing is imported from ``compactor.compaction``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]

SUMMARY_MARKER = "[Summary of {id}; original retained by caller]\n"
SEAL_MARKER = "[Earlier conversation, sealed summary]\n"
REASONS = {"fragment_or_decision_context_limit", "fragment_limit", "batch_limit", "flow_input_limit"}
ACTIONS = {"keep", "summarize", "archive"}
# Each unit's reason code (the core's ``units`` event, docs/report.md) and the only action it can explain.
UNIT_REASON_ACTION = {"pinned": "keep", "recent_tail": "keep", "not_sent": "keep", "flow_failed": "keep",
                      "model_kept": "keep", "summary_refused": "keep", "expansion_guard": "keep",
                      "summarized": "summarize", "archived": "archive"}
EVIDENCE_EXCERPT_OVER = 2000


def cdump(value: Any) -> str:
    """Compact JSON: ``,``/``:`` separators, non-ASCII raw (docs/behaviour.md#requests-and-responses)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def csize(value: Any) -> int:
    return len(cdump(value).encode("utf-8"))


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def split_units(messages: list[Message]) -> list[tuple[int, int]]:
    """``(start, end)`` of every unit: a message with truthy ``tool_calls`` absorbs the ``tool``
    messages right after it; any other message is a unit of one."""
    units, i = [], 0
    while i < len(messages):
        end = i + 1
        if messages[i].get("tool_calls"):
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
        units.append((i, end))
        i = end
    return units


# docs/differences.md: a user message right after an assistant turn that carries a tool observation.
_OBSERVATION_SIGNS = re.compile(
    r"<returncode>|<output>|<output_head>|^\s*(?:OBSERVATION|Observation)\s*:|\(Current directory: [^)\n]*\)"
    r"|^\s*EXECUTION RESULT of \[|\[Command finished with exit code|<tool_response>|<tool_result>"
    r"|<function_results>|^\s*Tool (?:result|output)\s*:", re.MULTILINE)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "" if content is None else json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def default_pin(messages: list[Message], index: int) -> bool:
    """Pinned without ``pinned_indices``: a user message unless it observes the assistant turn before it."""
    if messages[index].get("role") != "user":
        return False
    observes = index > 0 and messages[index - 1].get("role") == "assistant" and bool(
        _OBSERVATION_SIGNS.search(_text(messages[index].get("content"))))
    return not observes


CHAT_FIELDS = ("role", "name", "content", "refusal", "tool_calls", "tool_call_id", "function_call")


def chat_view(message: Message) -> Message:
    """What a model is shown of a chat message (docs/formats.md): the chat fields, optional ones when set,
    each tool call's ``id``/``type``/``function``."""
    view = {k: v for k, v in message.items() if k in CHAT_FIELDS and (v is not None or k in ("role", "content"))}
    if isinstance(view.get("tool_calls"), list):
        view["tool_calls"] = [{k: v for k, v in c.items() if k in ("id", "type", "function")}
                              if isinstance(c, dict) else c for c in view["tool_calls"]]
    return view


def excerpted(unit_messages: list[Message]) -> bool:
    """Whether the decision model sees only an excerpt of this unit (ASCII JSON of its view over 2000 chars)."""
    return len(json.dumps([chat_view(m) for m in unit_messages])) > EVIDENCE_EXCERPT_OVER


@dataclass(frozen=True)
class Plan:
    """What the request protects, recomputed from docs/behaviour.md#decision (pins)."""

    units: list[tuple[int, int]]
    protected: set[int]  # unit starts
    budget: int

    @property
    def candidates(self) -> list[tuple[int, int]]:
        return [u for u in self.units if u[0] not in self.protected]


def plan_for(messages: list[Message], *, keep_recent: int, pinned_indices: list[int] | None,
             target_ratio: float) -> Plan:
    units = split_units(messages)
    if pinned_indices is None:
        pins = {i for i in range(len(messages)) if default_pin(messages, i)}
    else:
        pins = set(pinned_indices)
    pins |= {i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")}
    keep = max(1, keep_recent)
    tail = set(range(max(0, len(messages) - keep), len(messages)))
    protected = {s for s, e in units if any(i in pins or i in tail for i in range(s, e))}
    target = int(csize(messages) * target_ratio)
    retained = csize([m for s, e in units if s in protected for m in messages[s:e]])
    n_candidates = len(units) - len(protected)
    budget = min(1_048_576, max(128, (target - retained) // max(1, n_candidates) - 100))
    return Plan(units=units, protected=protected, budget=budget)


def walk_output(messages: list[Message], output: list[Message], manifest: list[dict[str, Any]]
                ) -> dict[int, list[Message]]:
    """Check that ``output`` is the units in order, each itself (keep), one summary message
    (summarize) or nothing (archive), as the manifest says; return ``start -> emitted messages``."""
    emitted: dict[int, list[Message]] = {}
    pos = 0
    for entry in manifest:
        start, end, action = entry["start"], entry["end"], entry["action"]
        original = messages[start:end]
        if action == "keep":
            got = output[pos:pos + len(original)]
            assert cdump(got) == cdump(original), f"kept unit {entry['id']} is not byte-identical"
            pos += len(original)
        elif action == "summarize":
            assert pos < len(output), f"summary of {entry['id']} missing"
            got = [output[pos]]
            summary = output[pos]
            marker = SUMMARY_MARKER.format(id=entry["id"])
            assert set(summary) == {"role", "content"} and summary["role"] == "assistant", summary
            assert isinstance(summary["content"], str) and summary["content"].startswith(marker), summary
            assert summary["content"][len(marker):].strip(), "blank summary accepted"
            assert csize(summary) < csize(original), "summary not smaller than its unit"
            pos += 1
        else:
            assert action == "archive", action
            got = []
        emitted[start] = got
    assert pos == len(output), "output has messages no unit accounts for"
    return emitted


def check_tool_pairing(messages: list[Message], output: list[Message]) -> None:
    """Every answering ``tool`` message in the output follows its call; every call keeps its results."""
    results_of: dict[str, list[Message]] = {}  # compact JSON of a calling message -> its results
    answering: set[str] = set()  # tool_call_ids answered inside their call's unit in the input
    for start, end in split_units(messages):
        head = messages[start]
        if head.get("tool_calls"):
            results_of[cdump(head)] = messages[start + 1:end]
            ids = {c.get("id") for c in head["tool_calls"] if isinstance(c, dict)}
            answering |= {m.get("tool_call_id") for m in messages[start + 1:end] if m.get("tool_call_id") in ids}
    for j, message in enumerate(output):
        key = cdump(message)
        if message.get("tool_calls") and key in results_of:
            following = []
            for later in output[j + 1:]:
                if later.get("role") != "tool":
                    break
                following.append(later)
            # A stray result may come to sit after them when the unit between was archived.
            assert cdump(following[:len(results_of[key])]) == cdump(results_of[key]), "a tool call lost results"
        if message.get("role") == "tool" and message.get("tool_call_id") in answering:
            k = j
            while k > 0 and output[k - 1].get("role") == "tool":
                k -= 1
            assert k > 0, "a tool result lost its call"
            calls = output[k - 1].get("tool_calls") or []
            assert message["tool_call_id"] in {c.get("id") for c in calls if isinstance(c, dict)}, \
                "a tool result does not follow its call"


def check_decision_body(messages: list[Message], body: dict[str, Any], *, keep_recent: int = 6,
                        pinned_indices: list[int] | None = None, target_ratio: float = 0.1,
                        reasons: dict[str, str] | None = None) -> dict[int, list[Message]]:
    """Assert every invariant of a decision-mode body (and of the units' ``reasons`` when given);
    return ``start -> emitted messages``."""
    assert set(body) <= {"messages", "compacted", "compaction", "usage", "x_router"}, set(body)
    output = body["messages"]
    assert isinstance(output, list)
    report = body["compaction"]
    plan = plan_for(messages, keep_recent=keep_recent, pinned_indices=pinned_indices, target_ratio=target_ratio)

    manifest = report["fragments"]
    assert [(e["id"], e["start"], e["end"]) for e in manifest] == [(f"fragment_{s}", s, e) for s, e in plan.units]
    assert all({"id", "start", "end", "action", "reason"} <= set(e) <= {"id", "start", "end", "action", "reason",
                                                                     "decider_reason"}
               and e["action"] in ACTIONS and e["reason"] in UNIT_REASON_ACTION
               and UNIT_REASON_ACTION[e["reason"]] == e["action"] for e in manifest)
    assert all(isinstance(e["decider_reason"], str) and e["decider_reason"] for e in manifest if "decider_reason" in e)
    emitted = walk_output(messages, output, manifest)
    actions = {e["start"]: e["action"] for e in manifest}

    for start in plan.protected:  # system, developer, pinned and recent-tail units
        assert actions[start] == "keep", f"protected unit fragment_{start} was {actions[start]}"
    if reasons is not None:
        assert list(reasons) == [e["id"] for e in manifest]
        for entry in manifest:  # a reason names the action it explains; protected units say why
            assert UNIT_REASON_ACTION[reasons[entry["id"]]] == entry["action"], (entry, reasons[entry["id"]])
            protected = entry["start"] in plan.protected
            assert (reasons[entry["id"]] in ("pinned", "recent_tail")) is protected, (entry, reasons[entry["id"]])
    for start, end in plan.units:
        if actions[start] == "archive":
            assert not excerpted(messages[start:end]), f"fragment_{start} archived from an excerpt"
    check_tool_pairing(messages, output)

    original_bytes, output_bytes = csize(messages), csize(output)
    assert report["original_bytes"] == original_bytes
    assert report["output_bytes"] == output_bytes
    assert output_bytes <= original_bytes
    if any(a != "keep" for a in actions.values()):  # expansion guard: a change must shrink
        assert output_bytes < original_bytes
    else:
        assert output == messages
    assert report["target_ratio"] == target_ratio
    assert report["target_bytes"] == int(original_bytes * target_ratio)
    assert report["target_met"] is (output_bytes <= report["target_bytes"])
    assert body["compacted"] is (output != messages)
    assert set(report["reasons"]) <= REASONS
    fingerprint = report["flow_fingerprint"]
    assert isinstance(fingerprint, str) and re.fullmatch(r"\d+-\d+", fingerprint)
    if "x_router" in body:
        assert body["x_router"]["model_family"] == f"flow:{fingerprint}"

    changed = report["first_changed_index"]
    if changed is None:
        assert output == messages
        assert report["preserved_prefix_bytes"] == original_bytes
    else:
        assert 0 <= changed <= min(len(messages), len(output))
        assert output[:changed] == messages[:changed]
        assert changed == min(len(messages), len(output)) or output[changed] != messages[changed]
        assert output != messages
        # the serialised transcript up to the first change: "[m0,...,mk-1," (as long as the list's JSON), or "["
        assert report["preserved_prefix_bytes"] == (csize(messages[:changed]) if changed else 1)
    if not plan.candidates:  # no call: no cost keys (docs/behaviour.md#requests-and-responses)
        assert "usage" not in body and "x_router" not in body
    return emitted
