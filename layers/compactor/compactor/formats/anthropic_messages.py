"""``anthropic-messages``: Anthropic Messages API messages (docs/formats.md).

Calls and results are content blocks: an assistant ``tool_use`` block is answered by a ``tool_result``
block (same id) in a later user message, and a unit holds the call with every message answering it.
The assistant messages with the same ``id`` (Claude Code stores one response per block, and the results of
its first calls between its blocks) are one unit, and a message holding only ``thinking`` joins the message
after it. The system prompt is the
request's top-level ``system``, outside the messages, so it is never touched. User messages with
anything besides tool results are the human's turns, protected by default.

``thinking`` and ``redacted_thinking`` blocks never reach the models (their text would leak into a
summary); a unit that is summarized or archived loses them, which the Messages API allows for every
turn but the one still in progress, whose last two units stay in the protected tail
(:meth:`AnthropicMessages.protected_tail_start`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from compactor.compaction.units import Unit
from compactor.markers import tool_call_line
from compactor.formats.base import (Dialect, Item, Placeholder, arguments_shown, blocks, media_free_fields,
                                   media_marker, paired_split, shown_string)

ROLES = ("user", "assistant")
HIDDEN = ("thinking", "redacted_thinking")
CALLS = ("tool_use", "server_tool_use", "mcp_tool_use")
# Results whose ``content`` may be a string whatever it was (a string or a list of blocks): what mask replaces.
STRING_RESULTS = ("tool_result", "mcp_tool_result")
COMPACTION = "compaction"
"""The API's server-side compaction block (``{"type": "compaction", "content": <summary>}`` in an assistant message):
the API drops every block before it, so its summary is the context from there on; ``content`` null is a failed
compaction the API treats as a no-op (docs/formats.md "Earlier compactions")."""
# What a model reads of a message: the Messages API's message fields. The rest is what a harness stores beside them
# (Claude Code's records keep the API's response: its id, model, stop reason and usage), which no model needs.
MODEL_FIELDS = frozenset({"role", "content"})
SYSTEM_BLOCK = "mid_conv_system"
"""System instructions given mid-conversation (``{"type": "mid_conv_system", "content": [text blocks]}``), as a
``system`` or ``developer`` message is in the other formats."""


def _opens(item: Item) -> set[str]:
    if item.get("role") != "assistant":
        return set()
    return {b["id"] for b in blocks(item.get("content")) if b.get("type") in CALLS and isinstance(b.get("id"), str)}


def _closes(item: Item) -> set[str]:
    return {b["tool_use_id"] for b in blocks(item.get("content"))
            if isinstance(b.get("tool_use_id"), str) and str(b.get("type", "")).endswith("tool_result")}


def _hidden_only(item: Item) -> bool:
    content = blocks(item.get("content"))
    return bool(content) and isinstance(item.get("content"), list) and all(b.get("type") in HIDDEN for b in content)


def _same_turn(prev: Item, nxt: Item) -> bool:
    turn = prev.get("id")
    return (isinstance(turn, str) and prev.get("role") == "assistant" == nxt.get("role")
            and nxt.get("id") == turn)


def _response_links(items: list[Item]) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
    """The first assistant message of a response id opens, and the last closes, a link of their own (``paired_split``'s
    ``links``), when the id's messages are not all next to each other: Claude Code writes one response as a record
    per content block and writes each call's result as soon as it has it, so the response's later blocks (more
    calls, its text) come after the results of its first calls. One unit holds the response with its results: a
    response's thinking signature covers all of its blocks, and the API sends it as one message."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, item in enumerate(items):
        response = item.get("id")
        if item.get("role") == "assistant" and isinstance(response, str):
            first.setdefault(response, index)
            last[response] = index
    opened: dict[int, set[str]] = {}
    closed: dict[int, set[str]] = {}
    for response, start in first.items():
        end = last[response]
        if any(items[k].get("id") != response or items[k].get("role") != "assistant" for k in range(start, end + 1)):
            link = f"response:{response}"  # apart from tool_use ids
            opened.setdefault(start, set()).add(link)
            closed.setdefault(end, set()).add(link)
    return opened, closed


def _human(item: Item) -> bool:
    if item.get("role") != "user":
        return False
    content = item.get("content")
    if not isinstance(content, list):
        return True
    return any(not str(b.get("type", "")).endswith("tool_result") for b in blocks(content))


def _answers_calls(item: Item) -> bool:
    """A user message carrying tool results (whatever text it holds beside them)."""
    return item.get("role") == "user" and any(str(b.get("type", "")).endswith("tool_result")
                                              for b in blocks(item.get("content")))


def _turn_in_progress(count: int, assistant: Callable[[int], bool], answers: Callable[[int], bool]) -> int | None:
    """The first of the assistant messages the API merges into the final one (a response a harness stored as several
    messages), when a turn is in progress; ``None`` when no assistant message is followed by the human's turn. Every
    message after the final assistant message is a user one, and the API combines consecutive user messages into one
    turn: the turn goes on while they carry tool results, whatever text they hold beside them or in a message of their
    own (Claude Code stores "[Request interrupted by user for tool use]" and reminders as a message after the results),
    and the Messages API still wants the final assistant message, whose calls those results answer, to start with its
    thinking ("a final `assistant` message must start with a thinking block")."""
    final = next((i for i in range(count - 1, -1, -1) if assistant(i)), -1)
    if final < 0 or (final + 1 < count and not any(answers(i) for i in range(final + 1, count))):
        return None
    while final > 0 and assistant(final - 1):
        final -= 1
    return final


class AnthropicMessages(Dialect):
    name = "anthropic-messages"
    items_field = "messages"
    chat_items = False

    def validate(self, items: list[Item]) -> None:
        super().validate(items)
        for index, item in enumerate(items):
            if item.get("role") not in ROLES:
                raise ValueError(f"messages[{index}]: role must be 'user' or 'assistant' in anthropic-messages "
                                 "(the system prompt is the top-level 'system')")

    def split_units(self, items: list[Item]) -> list[Unit]:
        return self.paired(items)[0]

    def paired(self, items: list[Item]) -> tuple[list[Unit], set[int]]:
        return paired_split(items, opens=_opens, closes=_closes, leads=_hidden_only, same_turn=_same_turn,
                            turn_start=_human, links=_response_links(items))

    def always_pinned(self, items: list[Item]) -> set[int]:
        """The first message when it is a user message: the Messages API (Amazon Bedrock's too) refuses a
        conversation whose first message is not a user message, and a summary is an assistant message. And every
        message of a unit that loads deferred tools (a tool search's call with its ``tool_reference`` result): the
        later calls of those tools need it, and the whole unit, so that seal, which holds the always-pinned items
        of its middle after the summary, never parts the result from its call (docs/formats.md "Deferred tools");
        the same for a message holding a server-side compaction or mid-conversation system instructions
        (:func:`_pins_unit`)."""
        pinned = {0} if items and items[0].get("role") == "user" else set()
        pinned |= self.whole_units(items, [_pins_unit(item) for item in items])
        return pinned | self.late_pairs(items)

    def opaque_state(self, items: list[Item]) -> set[int]:
        """The messages holding a server-side compaction's summary (:data:`COMPACTION`): the API drops every block
        before it, so seal seals only what follows the last one."""
        return {i for i, item in enumerate(items) if any(b.get("type") == COMPACTION and b.get("content") is not None
                                                         for b in blocks(item.get("content")))}

    def default_pins(self, items: list[Item]) -> set[int]:
        return {i for i, m in enumerate(items) if _human(m)}

    def protected_tail_start(self, items: list[Item], units: list[Unit]) -> int | None:
        """The last two units of the turn in progress (docs/formats.md "Hidden reasoning"): the one holding
        the final assistant message (from the first of the consecutive assistant messages the API merges into
        it), whose thinking the Messages API needs back intact, and the one before it, so that no new item
        lands next to that message (an assistant summary would merge into it).
        Only these two: an agent's loop of hundreds of tool cycles after one prompt still compacts.
        ``None`` when no turn is in progress: the human's turn follows the last assistant message (the user messages
        after it carry no tool results, :func:`_turn_in_progress`)."""
        final = _turn_in_progress(len(items), lambda i: items[i].get("role") == "assistant",
                                  lambda i: _answers_calls(items[i]))
        if final is None:
            return None
        at = next(k for k, unit in enumerate(units) if unit.start <= final < unit.end)
        return units[max(0, at - 1)].start

    def stream_facts(self) -> StreamFacts:
        return StreamFacts()

    def model_view(self, items: list[Item]) -> list[Item]:
        """The messages without their hidden reasoning (a message holding nothing else left out), and a server-side
        compaction block without its ``encrypted_content`` (opaque bytes to a model, as a thinking signature is;
        its ``content``, the summary, stays), and each base64 source (an ``image`` or ``document`` block's, in a
        message or a tool's result) shown by its marker (:meth:`media_shown`). A message is its Messages API fields
        only (:data:`MODEL_FIELDS`): what a harness stores beside them (Claude Code keeps the API's whole response:
        ``id``, ``model``, ``usage``, ``stop_reason``…) never reaches a model (docs/formats.md "Hidden reasoning")."""
        view = []
        for item in items:
            if not item.keys() <= MODEL_FIELDS:
                item = {k: v for k, v in item.items() if k in MODEL_FIELDS}
            content = item.get("content")
            if isinstance(content, list) and any(isinstance(b, dict) and (b.get("type") in HIDDEN or _opaque(b))
                                                 for b in content):
                kept = [{k: v for k, v in b.items() if k != "encrypted_content"} if _opaque(b) else b
                        for b in content if not (isinstance(b, dict) and b.get("type") in HIDDEN)]
                if not kept:
                    continue
                item = {**item, "content": kept}
            view.append(self.media_shown(item))
        return view

    def media_shown(self, item: Item) -> Item:
        """Each base64 source in the content (an ``image`` or ``document`` block's, in a message, a ``tool_result`` or
        a fetched PDF) shown by its marker, and the opaque fields of a server tool's results and of a web search
        citation left out (:data:`OPAQUE_FIELDS`)."""
        item = media_free_fields(item, ("content",))
        content = item.get("content")
        if type(content) is not list:
            return item
        kept: list[Any] | None = None
        for index, block in enumerate(content):
            shown = _opaque_free(block)
            if shown is not block:
                if kept is None:
                    kept = list(content)
                kept[index] = shown
        return item if kept is None else {**item, "content": kept}

    def text_item(self, role: str, text: str) -> Item:
        # No system role among the messages: the sealed summary is a user turn.
        return {"role": "assistant" if role == "assistant" else "user", "content": [{"type": "text", "text": text}]}

    def render_line(self, item: Item) -> str:
        content = item.get("content")
        parts = [shown_string(content)] if isinstance(content, str) else []
        for block in blocks(content):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append(shown_string(block["text"]))
            elif kind in CALLS:
                parts.append(tool_call_line(block.get("name"), _dumps(arguments_shown(block.get("input")))))
            elif str(kind).endswith("tool_result"):
                parts.append(f"[tool result] {_result_text(block.get('content'))}")
            elif (marker := media_marker(block)) is not None:
                parts.append(marker)
        return f"{item.get('role')}: " + "\n".join(p for p in parts if p)

    def call_names(self, items: list[Item]) -> dict[str, str]:
        return {b["id"]: str(b.get("name")) for item in items if item.get("role") == "assistant"
                for b in blocks(item.get("content")) if b.get("type") in CALLS and isinstance(b.get("id"), str)}

    def masked(self, items: list[Item], index: int, placeholder: Placeholder) -> Item | None:
        """A user message's ``tool_result`` (and ``mcp_tool_result``) blocks, each keeping its ``tool_use_id``
        (and ``is_error``); in an assistant message, an ``mcp_tool_result`` and a server tool's result where the API
        takes a smaller one back (:func:`_masked_server_result`). A web search's result stays (its only smaller form
        is an error), and so does a result loading deferred tools (``tool_reference`` blocks)."""
        item = items[index]
        content, role = item.get("content"), item.get("role")
        if role not in ROLES or not isinstance(content, list):
            return None
        replaced, changed = [], False
        for block in content:
            new = _masked_block(block, role, placeholder) if isinstance(block, dict) else None
            if new is not None:
                block, changed = new, True
            replaced.append(block)
        return {**item, "content": replaced} if changed else None


def _masked_block(block: Item, role: str, placeholder: Placeholder) -> Item | None:
    """``block`` with its output replaced by ``placeholder``'s text, or ``None`` when it stays: a ``tool_result`` of a
    user message or an ``mcp_tool_result`` (of the assistant message of its call, where the MCP connector puts it),
    whose ``content`` may be a string whatever it was; else a server tool's result (:func:`_masked_server_result`)."""
    call_id = block.get("tool_use_id") if isinstance(block.get("tool_use_id"), str) else None
    kind = block.get("type")
    if (kind == "mcp_tool_result" or (kind in STRING_RESULTS and role == "user")) and not _loads_tools(block):
        text = placeholder(call_id, block.get("content"))
        return None if text is None else {**block, "content": text}
    result = block.get("content")
    if role != "assistant" or kind not in SERVER_RESULTS or not isinstance(result, dict):
        return None
    masked = _masked_server_result(result, lambda output: placeholder(call_id, output))
    return None if masked is None else {**block, "content": masked}


SERVER_RESULTS = ("code_execution_tool_result", "bash_code_execution_tool_result",
                  "text_editor_code_execution_tool_result", "web_fetch_tool_result")
"""The server tools' results mask replaces (:func:`_masked_server_result`); the others (``web_search_tool_result``,
``tool_search_tool_result``, ``advisor_tool_result``, an encrypted code execution result, an error) stay."""


def _masked_server_result(result: Item, stand_in: Callable[[Any], str | None]) -> Item | None:
    """A server tool's result ``content`` with its output replaced by ``stand_in(output)``, in the shape the API
    documents for it, or ``None`` when it has no such form (or the placeholder is not smaller): a code execution's or
    a bash execution's ``stdout`` (``stderr`` emptied; its return code and output files kept), a text editor's view
    of a text file (its ``content``), a fetched page's document not open to citations (its ``source``'s text or
    base64 ``data``, as a text source). A fetched document with ``citations`` enabled stays: the answer after it may
    cite it by position."""
    kind = result.get("type")
    if kind in ("code_execution_result", "bash_code_execution_result"):
        stdout, stderr = result.get("stdout"), result.get("stderr")
        if not isinstance(stdout, str) or not isinstance(stderr, str):
            return None
        text = stand_in(stdout + stderr)
        return None if text is None else {**result, "stdout": text, "stderr": ""}
    if kind == "text_editor_code_execution_view_result":
        if result.get("file_type") != "text" or not isinstance(result.get("content"), str):
            return None
        text = stand_in(result["content"])
        return None if text is None else {**result, "content": text}
    if kind == "web_fetch_result":
        document = result.get("content")
        source = document.get("source") if isinstance(document, dict) and document.get("type") == "document" else None
        if not isinstance(source, dict) or not isinstance(source.get("data"), str) or source.get("type") not in (
                "text", "base64"):
            return None
        citations = document.get("citations")
        if isinstance(citations, dict) and citations.get("enabled"):
            return None
        # Measured on the data: a text source's wrapper is the same, a base64 one's longer, so the result never grows.
        text = stand_in(source["data"])
        if text is None:
            return None
        return {**result, "content": {**document, "source": {"type": "text", "media_type": "text/plain", "data": text}}}
    return None


# The flags :class:`StreamFacts` keeps of each message, a byte each.
_USER, _ASSISTANT, _HUMAN, _HIDDEN_ONLY, _SAME_TURN, _PINS_UNIT, _ANSWERS = 1, 2, 4, 8, 16, 32, 64
_NONE: frozenset[str] = frozenset()


class StreamFacts:
    """What windows need of a stream's messages to find its units, pins and the tail of the turn in progress without
    holding the messages (docs/scale.md): a byte of flags per message, and the call ids of the messages that open or
    answer calls. A ``tool_use``'s unit runs to its last ``tool_result``, so where a unit ends is known only once
    the whole stream is read: :meth:`add` every message, in order, then ask. Each answer is what the dialect answers
    for the messages whole (``split_units``, ``default_pins`` and ``always_pinned``, ``protected_tail_start``)."""

    def __init__(self) -> None:
        self.flags = bytearray()
        self.opens: dict[int, frozenset[str]] = {}
        self.closes: dict[int, frozenset[str]] = {}
        self._turn: str | None = None  # the ``id`` of the previous message when it is an assistant message
        # Each assistant response id: its first and last message and how many messages carry it (``_response_links``).
        self._responses: dict[str, list[int]] = {}
        self._late: set[int] = set()  # the calls answered late and their late answers, once ``units`` is asked

    def add(self, item: Item) -> None:
        index, role = len(self.flags), item.get("role")
        flags = (_USER if role == "user" else 0) | (_ASSISTANT if role == "assistant" else 0)
        flags |= (_HUMAN if _human(item) else 0) | (_HIDDEN_ONLY if _hidden_only(item) else 0)
        flags |= _ANSWERS if _answers_calls(item) else 0
        if self._turn is not None and role == "assistant" and item.get("id") == self._turn:
            flags |= _SAME_TURN
        if _pins_unit(item):
            flags |= _PINS_UNIT
        self.flags.append(flags)
        turn = item.get("id")
        self._turn = turn if role == "assistant" and isinstance(turn, str) else None
        if self._turn is not None:
            seen = self._responses.get(self._turn)
            if seen is None:
                self._responses[self._turn] = [index, index, 1]
            else:
                seen[1], seen[2] = index, seen[2] + 1
        if opened := _opens(item):
            self.opens[index] = frozenset(opened)
        if closed := _closes(item):
            self.closes[index] = frozenset(closed)

    def units(self) -> list[Unit]:
        """:meth:`AnthropicMessages.split_units` of the messages added."""
        flags = self.flags
        opened: dict[int, set[str]] = {}
        closed: dict[int, set[str]] = {}
        for response, (start, end, count) in self._responses.items():
            if count != end - start + 1:  # another message between the response's messages (``_response_links``)
                opened.setdefault(start, set()).add(f"response:{response}")
                closed.setdefault(end, set()).add(f"response:{response}")
        units, self._late = paired_split(
            range(len(flags)), opens=lambda i: self.opens.get(i, _NONE),  # type: ignore[arg-type]
            closes=lambda i: self.closes.get(i, _NONE), leads=lambda i: bool(flags[i] & _HIDDEN_ONLY),
            same_turn=lambda _, nxt: bool(flags[nxt] & _SAME_TURN), turn_start=lambda i: bool(flags[i] & _HUMAN),
            links=(opened, closed))
        return units

    def pins(self, explicit: set[int] | None, units: list[Unit]) -> set[int]:
        """``instruction_pins``: ``explicit`` (else the human's turns), with the always-pinned messages."""
        flags = self.flags
        pins = set(explicit) if explicit is not None else {i for i, f in enumerate(flags) if f & _HUMAN}
        if flags and flags[0] & _USER:
            pins.add(0)
        late = self._late
        for unit in units:
            if any(flags[i] & _PINS_UNIT for i in unit.indexes()) or not late.isdisjoint(unit.indexes()):
                pins.update(unit.indexes())  # ``Dialect.late_pairs`` too
        return pins

    def tail_start(self, units: list[Unit]) -> int | None:
        """:meth:`AnthropicMessages.protected_tail_start` of the messages added."""
        flags = self.flags
        final = _turn_in_progress(len(flags), lambda i: bool(flags[i] & _ASSISTANT),
                                  lambda i: bool(flags[i] & _ANSWERS))
        if final is None:
            return None
        at = next(k for k, unit in enumerate(units) if unit.start <= final < unit.end)
        return units[max(0, at - 1)].start


OPAQUE_FIELDS = {"web_search_result": "encrypted_content", "advisor_redacted_result": "encrypted_content",
                 "encrypted_code_execution_result": "encrypted_stdout", "web_search_result_location": "encrypted_index"}
"""The opaque field of each object of the Messages API that carries one, by the object's ``type``: a web search's
results (in a ``web_search_tool_result``'s content), an advisor's redacted advice (an ``advisor_tool_result``'s), a code
execution's encrypted output (a ``code_execution_tool_result``'s) and a text block's citation of a search result. The
API wants them back verbatim; no model can read them, so the models' view leaves them out (docs/formats.md)."""
_HOLDING_OPAQUE = {"web_search_tool_result": "content", "advisor_tool_result": "content",
                   "code_execution_tool_result": "content", "text": "citations"}
"""Where a block holds objects of :data:`OPAQUE_FIELDS`, by the block's ``type``."""


def _opaque_free(block: Any) -> Any:
    """``block`` with the opaque fields of the objects it holds left out (:data:`OPAQUE_FIELDS`); ``block`` itself
    when it holds none."""
    kind = block.get("type") if type(block) is dict else None
    field = _HOLDING_OPAQUE.get(kind) if type(kind) is str else None
    inner = block.get(field) if field is not None else None
    if not isinstance(inner, (list, dict)):
        return block
    members = [inner] if isinstance(inner, dict) else inner
    shown = [{k: v for k, v in m.items() if k != opaque} if type(m) is dict and type(held := m.get("type")) is str
             and (opaque := OPAQUE_FIELDS.get(held)) is not None and opaque in m else m for m in members]
    if all(a is b for a, b in zip(shown, members)):
        return block
    return {**block, field: shown[0] if isinstance(inner, dict) else shown}


def _opaque(block: Any) -> bool:
    """A server-side compaction block carrying ``encrypted_content``, which the models' view leaves out."""
    return isinstance(block, dict) and block.get("type") == COMPACTION and "encrypted_content" in block


def _pins_unit(item: Item) -> bool:
    """Whether a message is always protected with its whole unit: it loads deferred tools (:func:`_loads_tools`), holds
    a server-side compaction (:data:`COMPACTION`, its content null included: the API wants it back as it was) or
    system instructions (:data:`SYSTEM_BLOCK`). A summary, an archive or a seal would lose what the later turns
    stand on: the loaded tools, the context the API keeps from the compaction on, the instructions."""
    return any(_loads_tools(block) or block.get("type") in (COMPACTION, SYSTEM_BLOCK)
               for block in blocks(item.get("content")))


def _loads_tools(result: Item) -> bool:
    """Whether a result block loads deferred tools: ``tool_reference`` blocks (a tool search's ``tool_result``, as
    Claude Code's ToolSearch answers, or the ``content.tool_references`` of the API's own
    ``tool_search_tool_result``) make those tools' definitions available from there on, so a placeholder, a
    summary or a seal in their place would unload tools the later calls use (docs/formats.md "Deferred tools")."""
    content = result.get("content")
    references = content.get("tool_references") if isinstance(content, dict) else content
    return any(b.get("type") == "tool_reference" for b in blocks(references))


RESULT_FIELDS = ("title", "url", "stdout", "stderr", "text", "error_code", "error_message")
"""What the seal summarizer reads of a server tool's result blocks (``web_search_result``, ``web_fetch_result``,
``code_execution_result``, an ``advisor_result``'s ``text``, an error), besides their text and a text editor view's
``content``: their encrypted content is of no use to it."""


def _result_text(content: Any) -> str:
    """What a result says: a string as it is, else its text blocks, an image or a document shown by its marker, a
    search result's title and URL (and text), a code execution's output, a tool reference by the tool it loads."""
    if isinstance(content, str):
        return shown_string(content)
    shown: list[str] = []
    for block in blocks([content] if isinstance(content, dict) else content):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            shown.append(shown_string(block["text"]))
        elif (marker := media_marker(block)) is not None:
            shown.append(marker)
        elif kind == "tool_reference":
            shown.append(f"[loads {block.get('tool_name')}]")
        else:
            shown += [block[k] for k in RESULT_FIELDS if isinstance(block.get(k), str) and block[k]]
            inner = block.get("content") if kind != "tool_result" else None
            if isinstance(inner, (list, dict)):
                shown.append(_result_text(inner))
            elif isinstance(inner, str):  # a text editor's view of a file
                shown.append(inner)
            if isinstance(block.get("tool_references"), list):
                shown.append(_result_text(block["tool_references"]))
    return " ".join(s for s in shown if s)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


DIALECT = AnthropicMessages()
