"""Hypothesis strategies: OpenAI-style agent transcripts with every shape compaction must survive.

Tool-call units (parallel calls, results in any order, calls without some results), stray ``tool``
messages, system/developer messages, user-role observations, unicode (emoji, non-BMP, CJK), empty,
null, missing and list contents, huge messages, and extra provider fields.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, settings, strategies as st

# Bug hunting: COMPACTOR_PROPERTY_HUNT=N runs N random examples per property instead of the CI set.
HUNT = int(os.environ.get("COMPACTOR_PROPERTY_HUNT", "0") or 0)


def ci_settings(max_examples: int) -> settings:
    """Deterministic for CI: derandomized, no example database, no per-example deadline."""
    if HUNT:
        return settings(derandomize=False, database=None, deadline=None, max_examples=HUNT, print_blob=True,
                        suppress_health_check=list(HealthCheck))
    return settings(derandomize=True, database=None, deadline=None, max_examples=max_examples,
                    suppress_health_check=list(HealthCheck))


FAST = ci_settings(120)

_ALPHABET = st.one_of(
    st.characters(codec="utf-8", exclude_categories=("Cs",)),  # any scalar value (no lone surrogates)
    st.sampled_from(["😀", "\U0001F9EA", "\U00010348", "中", "é", "\n", '"', "\\", "\u2028", "\x00"]),
)
TEXT = st.text(_ALPHABET, max_size=120)
# Large blocks are built by repetition: cheap to generate, and they cross the 2000-character excerpt
# threshold (an emoji is 12 ASCII characters), the 32 000-byte decision bound and the 50 000-byte item bound.
HUGE = st.builds(lambda piece, count: piece * count,
                 st.sampled_from(["x", "é", "😀", "ab\n", "\U00010348"]), st.integers(150, 60_000))
MEDIUM = st.builds(lambda t, n: (t or "y") * n, TEXT, st.integers(2, 40))
CONTENT = st.one_of(
    TEXT,
    MEDIUM,
    st.just(""),
    st.none(),
    HUGE,
    st.lists(st.builds(lambda t: {"type": "text", "text": t}, TEXT), max_size=3),
    st.builds(lambda code, out: f"<returncode>{code}</returncode>\n<output>\n{out}\n</output>",
              st.integers(0, 2), st.one_of(TEXT, HUGE)),
)
EXTRA = st.one_of(st.just({}), st.fixed_dictionaries({"extra": st.fixed_dictionaries(
    {"returncode": st.integers(0, 2), "note": TEXT})}), st.just({"name": "agent", "reasoning_content": None}))


def _message(role: str, content: Any, extra: dict[str, Any], drop_content: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": role}
    if not drop_content:
        message["content"] = content
    message.update(extra)
    return message


SINGLE = st.builds(
    _message,
    st.sampled_from(["system", "developer", "user", "user", "assistant", "assistant", "assistant", "tool", "exit"]),
    CONTENT, EXTRA, st.integers(0, 9).map(lambda n: n == 0),  # sometimes no "content" key at all
)


@st.composite
def tool_unit(draw: st.DrawFn) -> list[dict[str, Any]]:
    """An assistant message with 0–4 tool calls (0 = empty list, not a unit head) and some of their
    results in any order; call ids are placeholders numbered by :func:`transcripts`."""
    n_calls = draw(st.integers(0, 4))
    calls = [{"id": None, "type": "function",
              "function": {"name": draw(st.sampled_from(["bash", "read", "edit"])),
                           "arguments": json.dumps({"command": draw(TEXT)}, ensure_ascii=False)}}
             for _ in range(n_calls)]
    head: dict[str, Any] = {"role": "assistant", "content": draw(st.one_of(st.none(), TEXT, st.just(""))),
                            "tool_calls": calls}
    order = draw(st.permutations(range(n_calls)))
    answered = order[:draw(st.integers(0, n_calls))] if draw(st.integers(0, 4)) == 0 else order
    results = [{"role": "tool", "tool_call_id": i, "content": draw(CONTENT)} for i in answered]
    return [head, *results]


STRAY_TOOL = st.builds(lambda c: [{"role": "tool", "tool_call_id": "call_stray", "content": c}], CONTENT)
BLOCK = st.one_of(SINGLE.map(lambda m: [m]), tool_unit(), tool_unit(), STRAY_TOOL)


@st.composite
def transcripts(draw: st.DrawFn, max_blocks: int = 30) -> list[dict[str, Any]]:
    """A transcript, often starting with a system prompt and a user task like a real agent's."""
    prefix: list[dict[str, Any]] = []
    if draw(st.booleans()):
        prefix.append({"role": "system", "content": draw(TEXT)})
    if draw(st.booleans()):
        prefix.append({"role": "user", "content": draw(TEXT)})
    blocks = draw(st.lists(BLOCK, min_size=min(3, max_blocks), max_size=max_blocks))
    messages = prefix + [m for block in blocks for m in block]
    # Number the tool calls so ids are unique and results point at their own call.
    counter = 0
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls:
            ids = []
            for call in calls:
                call["id"] = f"call_{counter}"
                ids.append(call["id"])
                counter += 1
            j = index + 1
            while j < len(messages) and messages[j].get("role") == "tool" and isinstance(
                    messages[j].get("tool_call_id"), int):
                messages[j]["tool_call_id"] = ids[messages[j]["tool_call_id"]]
                j += 1
    for message in messages:  # results cut off from their call by generation order become strays
        if isinstance(message.get("tool_call_id"), int):
            message["tool_call_id"] = "call_orphan"
    return messages


@st.composite
def requests(draw: st.DrawFn, max_blocks: int = 30) -> dict[str, Any]:
    """``messages`` plus the request knobs: keep_recent, target_ratio and (explicit or default) pins."""
    messages = draw(transcripts(max_blocks))
    pins = None
    if messages and draw(st.booleans()):
        pins = sorted(draw(st.sets(st.integers(0, len(messages) - 1), max_size=4)))
    return {
        "messages": messages,
        "keep_recent": draw(st.sampled_from([1, 1, 2, 3]) | st.integers(-1, 8)),
        "target_ratio": draw(st.sampled_from([0.01, 0.1, 0.25, 0.5, 1.0])
                             | st.floats(min_value=1e-6, max_value=1.0, exclude_min=True)),
        "pinned_indices": pins,
    }
