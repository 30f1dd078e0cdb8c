"""What every transcript dialect supplies to compaction (docs/formats.md).

A dialect maps the caller's items (OpenAI chat messages, Anthropic Messages, OpenAI Responses input
items) to units without converting them: the items stay the caller's own dicts, so an item nobody
changed is written back byte-identically. Only new items (summaries, placeholders, the sealed summary)
are built here, in the dialect's own shape.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from compactor.chat import FILE_PARTS, IMAGE_PARTS
from compactor.compaction.units import Unit
from compactor.patterns import pattern

Item = dict[str, Any]


class Placeholder(Protocol):
    """``placeholder(call_id, content, name=None)``: the text standing in for a masked tool output ``content``,
    or ``None`` when that output is to stay as it is (a placeholder would not be smaller). ``name``: the tool's
    name when the output names it itself (a legacy ``function`` message has a name and no call id); else the
    name of the call ``call_id``."""

    def __call__(self, call_id: str | None, content: Any, name: str | None = None) -> str | None: ...


ANTHROPIC_BLOCKS = frozenset(("tool_use", "tool_result", "thinking", "redacted_thinking"))
"""Content blocks only Anthropic messages hold: a message with one in its content list is ``anthropic-messages``."""
CHAT_ONLY_ROLES = ("tool", "function")
CHAT_ONLY_FIELDS = ("tool_calls", "tool_call_id", "function_call")
"""What only a Chat Completions message has: the Responses API's and the Messages API's messages take neither these
roles nor these fields (a Responses call is an item of its own, typed; an Anthropic call a ``tool_use`` block)."""


def looks_like(item: Item) -> tuple[str, str] | None:
    """``(format, what shows it)`` when ``item`` plainly belongs to one format, by what only that format has: a
    ``type`` and no ``role`` (or an item reference's ``id`` alone), ``openai-responses``; a ``tool``/``function``
    role or a ``tool_calls``/``tool_call_id``/``function_call`` field, ``openai-chat``; a ``tool_use``,
    ``tool_result`` or ``thinking`` content block, ``anthropic-messages``. ``None`` for an item every format may
    hold: a message with a role and text (the Responses API's role-only "easy input message" is one)."""
    if "role" not in item:
        kind = item.get("type")
        if isinstance(kind, str):
            return "openai-responses", f"type {kind[:64]!r} and no role"
        if kind is None and isinstance(item.get("id"), str):
            return "openai-responses", "an item reference's id and no role"
        return None
    role = item.get("role")
    if role in CHAT_ONLY_ROLES:
        return "openai-chat", f"role {role!r}"
    for field in CHAT_ONLY_FIELDS:
        if item.get(field) is not None:
            return "openai-chat", f"a {field!r} field"
    content = item.get("content")
    if type(content) is list:
        for part in content:
            if type(part) is dict and type(kind := part.get("type")) is str and kind in ANTHROPIC_BLOCKS:
                return "anthropic-messages", f"a {kind!r} block"
    return None


def other_format(item: Item, declared: str, where: str) -> str | None:
    """What the caller is told when ``item`` (at ``where``: ``input[3]``, ``message 3``) plainly belongs to another
    format than the ``declared`` one (:func:`looks_like`), in the same words on every path; else ``None``."""
    found = looks_like(item)
    if found is None or found[0] == declared:
        return None
    other, evidence = found
    return f"{where} looks like {other} ({evidence}), but the format is {declared}: send the items with format {other}"


LANGCHAIN_TYPES = frozenset(("human", "ai", "system", "tool", "function", "chat"))
"""The ``type`` of a LangChain message dumped as a dict (``messages_to_dict``'s ``{"type", "data"}``, or a message's own
fields, ``additional_kwargs`` and ``response_metadata`` among them): no format's item has one of these types."""
_SEND_MESSAGES = ("each user and assistant record's 'message' as the items, with format anthropic-messages, or "
                  "compact the session file itself (compactor compact FILE, or the S3 path), which reads and writes "
                  "it as a session")
_SEND_PAYLOADS = ("the payloads of its 'response_item' lines as the items, with format openai-responses, or compact "
                  "the session file itself (compactor compact FILE, or the S3 path), which reads and writes it as a "
                  "session")
_SEND_CHAT = ("OpenAI chat messages, with format openai-chat (langchain_core.messages.convert_to_openai_messages makes "
              "them)")
_SEND_CHAT_GEMINI = ("OpenAI chat messages, with format openai-chat: each functionCall in its assistant message's "
                     "'tool_calls', each functionResponse a 'tool' message with its 'tool_call_id'")
AI_SDK_PARTS = ("tool-call", "tool-result")
"""Content parts of the Vercel AI SDK's messages (no format's part: Chat Completions calls are ``tool_calls``, Anthropic
blocks ``tool_use`` / ``tool_result``, Responses calls items of their own)."""
_SEND_CHAT_CALLS = ("OpenAI chat messages, with format openai-chat: each call in its assistant message's 'tool_calls' "
                    "({\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}), each result a 'tool' "
                    "message with its 'tool_call_id'")


def foreign_item(item: Item) -> tuple[str, str] | None:
    """``(what item is, what to send instead)`` when ``item`` is no item of any format but another program's record of
    one: a Claude Code session record (``{"type": "user", "message": {...}, "uuid", …}``), a Codex rollout line
    (``{"timestamp", "type", "payload"}``), a LangChain message (``{"type": "human", "data": {...}}``, or its own
    fields: ``content``, ``additional_kwargs``, ``response_metadata``, …), a Vercel AI SDK message (a ``tool-call``
    or ``tool-result`` part) or a Gemini ``Content`` (``parts``, no ``content``); ``None`` for anything else. Read as items, the first three's ``type`` and missing
    ``role`` made them Responses items: they were refused with the advice to send them as ``openai-responses``, which
    took them and compacted them as items of unknown types; the AI SDK's and Gemini's messages passed for chat
    messages whose calls and results nothing paired, so a summary or a seal took a call and left its result, or the
    other way round (docs/formats.md "Records of other programs")."""
    if "role" in item:
        if "content" not in item and type(item.get("parts")) is list:
            return f"a Gemini Content (role {str(item['role'])[:64]!r} with 'parts')", _SEND_CHAT_GEMINI
        content = item.get("content")
        if type(content) is list:
            for part in content:
                if type(part) is dict and (part_kind := part.get("type")) in AI_SDK_PARTS:
                    return f"a Vercel AI SDK message (a {part_kind!r} part)", _SEND_CHAT_CALLS
        return None
    kind = item.get("type")
    if type(kind) is not str:
        return None
    if kind in ("user", "assistant") and type(item.get("message")) is dict:
        return f"a Claude Code session record (type {kind!r} with a 'message')", _SEND_MESSAGES
    if "payload" in item and "timestamp" in item and type(item["payload"]) is dict:
        return f"a Codex rollout line (type {kind[:64]!r} with a 'payload')", _SEND_PAYLOADS
    if kind in LANGCHAIN_TYPES and langchain_message(item):
        return f"a LangChain message (type {kind!r})", _SEND_CHAT
    return None


def langchain_message(item: Item) -> bool:
    """Whether ``item`` is a LangChain message dumped as a dict (:data:`LANGCHAIN_TYPES`, no ``role``)."""
    return ("role" not in item and item.get("type") in LANGCHAIN_TYPES
            and (type(item.get("data")) is dict or "additional_kwargs" in item or "response_metadata" in item))


def foreign_refusal(item: Item, where: str) -> str | None:
    """What the caller is told when the item at ``where`` is another program's record (:func:`foreign_item`)."""
    found = foreign_item(item)
    return None if found is None else f"{where} is {found[0]}, not an item: send {found[1]}"


_COUNTS = {2: "two", 3: "three"}


def mixed_formats(first: Mapping[str, tuple[str, str]]) -> str:
    """What the caller is told when the items plainly belong to two formats or three: ``first`` maps each format, in
    the order its first item comes, to that item's ``where`` and what shows it (:func:`looks_like`). No format named
    fits such items: the transcript is to be mended, not the format (docs/formats.md "The declared format")."""
    named = [f"{where} is the first {format} item ({evidence})" for format, (where, evidence) in first.items()]
    return f"the items are of {_COUNTS[len(named)]} formats: {', '.join(named)}; send the items of one format"


def format_refusal(items: Iterable[Item], declared: str, field: str) -> str | None:
    """What the caller is told when an item of ``items`` plainly belongs to another format than the one declared
    (:func:`other_format`, naming the first such item), else ``None``; when the items plainly belong to more than one
    format, the first item of each is named instead (:func:`mixed_formats`). ``items`` is read once, in order: the
    whole reading's validation and a streamed reading (its messages read again) say the same words."""
    first: dict[str, tuple[str, str]] = {}
    refused = None
    for index, item in enumerate(items):
        if foreign_item(item) is not None:  # another program's record: no format's item (docs/formats.md)
            return foreign_refusal(item, f"{field}[{index}]")
        found = looks_like(item)
        if found is None:
            continue
        if found[0] not in first:
            first[found[0]] = (f"{field}[{index}]", found[1])
        if refused is None and found[0] != declared:
            refused = other_format(item, declared, f"{field}[{index}]")
    if refused is None:
        return None
    return mixed_formats(first) if len(first) > 1 else refused


def refuse_other_format(items: list[Item], declared: str, field: str) -> None:
    """A ``ValueError`` (the caller's 422) naming the first item that plainly belongs to another format than the one
    declared, and that format (docs/formats.md "The declared format"): compacted under the declared format's rules,
    its calls would not be paired nor its pins right, and the provider would refuse what comes back. When the items
    plainly belong to more than one format, the first item of each is named instead (:func:`format_refusal`)."""
    if (refused := format_refusal(items, declared, field)) is not None:
        raise ValueError(refused)


class Dialect:
    """The per-format rules; each ``compactor/formats/<format>.py`` module defines one subclass."""

    name: str = ""
    items_field: str = "messages"  # the request's and the response's key holding the items
    # Whether the items are chat messages (openai-chat); else the salience scan reads each model view item as
    # the chat messages it corresponds to (compactor.chat.chat_reading; docs/formats.md).
    chat_items: bool = True

    def validate(self, items: list[Item]) -> None:
        """Raise ``ValueError`` (a 422 for the caller) when an item cannot be in this format: by default when one
        plainly belongs to another format (:func:`refuse_other_format`)."""
        refuse_other_format(items, self.name, self.items_field)

    def split_units(self, items: list[Item]) -> list[Unit]:
        raise NotImplementedError

    def always_pinned(self, items: list[Item]) -> set[int]:
        """System-like items, protected whatever the request pins; seal keeps those of its middle after its
        summary, so an item of a unit of several is returned with the whole unit (docs/formats.md)."""
        return set()

    def whole_units(self, items: list[Item], marked: list[bool]) -> set[int]:
        """Every index of each unit holding a ``marked`` item (``marked[i]`` for ``items[i]``): such an item is
        always pinned with its whole unit (:meth:`always_pinned`)."""
        if not any(marked):
            return set()
        return {i for unit in self.split_units(items) if any(marked[unit.start:unit.end]) for i in unit.indexes()}

    def paired(self, items: list[Item]) -> tuple[list[Unit], set[int]]:
        """:meth:`split_units`, and the items of the calls answered late, past other work, with their late answers
        (formats whose calls and results are items paired by id: :func:`paired_split`)."""
        return self.split_units(items), set()

    def late_pairs(self, items: list[Item]) -> set[int]:
        """Every item of the units holding a call answered late or its late answer: always protected, so that they
        stay paired, in order, while the work between them is compacted (docs/formats.md)."""
        units, late = self.paired(items)
        return {i for unit in units if not late.isdisjoint(unit.indexes()) for i in unit.indexes()} if late else set()

    def opaque_state(self, items: list[Item]) -> set[int]:
        """Items carrying state no summary can stand in for (an earlier compaction's encrypted state): always
        pinned, hidden from the models, and seal mode seals only what follows the last one."""
        return set()

    def default_pins(self, items: list[Item]) -> set[int]:
        """Items pinned when the request names no ``pinned_indices``: the human's turns."""
        return set()

    def protected_tail_start(self, items: list[Item], units: list[Unit]) -> int | None:
        """Where a tail the format itself needs protected starts (``units``: ``split_units(items)``), in
        addition to the last ``keep_recent`` items; ``None`` when it needs none (docs/formats.md)."""
        return None

    def stream_facts(self) -> Any:
        """For a format whose units are known only once every item is read (calls and results paired by id), an
        object that is given each item of a stream (``add``) and then answers its units, pins and protected tail
        (``units``, ``pins``, ``tail_start``) without holding the items: windows read such a format so (docs/scale.md).
        ``None``: a unit is known from the items next to each other (``openai-chat``)."""
        return None

    def model_view(self, items: list[Item]) -> list[Item]:
        """What the decision and summary models see of these items (hidden reasoning left out, base64 payloads shown
        by their markers: :meth:`media_shown`), item by item: fields and blocks are only left out or replaced in
        place, so a view item keeps its item's key order."""
        return items

    def media_shown(self, item: Item) -> Item:
        """``item`` with each base64 payload the format documents shown by its marker (:func:`media_free_fields`)
        and any opaque field the format documents left out (an Anthropic server tool's encrypted results), nothing
        else changed: ``item`` itself when it holds none. The models' view is built on it, and batching
        counts a unit so (docs/formats.md "Images and files")."""
        return item

    def text_item(self, role: str, text: str) -> Item:
        """A new item carrying ``text`` for ``role`` (``assistant``, or ``system`` for the sealed summary)."""
        raise NotImplementedError

    def render_line(self, item: Item) -> str:
        """One line of the seal summarizer's input for this item (hidden reasoning left out)."""
        raise NotImplementedError

    def call_names(self, items: list[Item]) -> dict[str, str]:
        """Call id -> tool name, for the tool calls among ``items``."""
        return {}

    def masked(self, items: list[Item], index: int, placeholder: Placeholder) -> Item | None:
        """``items[index]`` with each tool output it carries replaced by ``placeholder(call_id, output)``
        (``mask`` mode; an output whose placeholder is ``None`` stays), or ``None`` when it carries none. An
        output is only replaced where the format accepts a string in its place (a typed output stays)."""
        return None


def paired_split(items: list[Item], *, opens: Callable[[Item], set[str]], closes: Callable[[Item], set[str]],
                 leads: Callable[[Item], bool], same_turn: Callable[[Item, Item], bool],
                 links: tuple[Mapping[int, set[str]], Mapping[int, set[str]]] = ({}, {}),
                 turn_start: Callable[[Item], bool] = lambda item: False) -> tuple[list[Unit], set[int]]:
    """Units of a dialect whose calls and results are separate items paired by id, and the items of the calls
    answered late with their late answers (to protect, each with its unit: docs/formats.md).

    A unit starts at an item and takes in the items after it while (a) the previous item only leads
    into the next one (hidden reasoning before what it reasons about), (b) both belong to the same
    turn (one response split over several items), (c) a call of the unit is still unanswered and
    the next item is a call or answers one of the unit's calls, or (d) a call of the unit is answered
    further on: whatever lies between a call and its last answer (reasoning, a message, other calls)
    is in the call's unit, so no call is parted from its results. An unanswered call at the end (an
    agent stopped mid-call) ends its unit at the next item that is neither a call nor a result.
    A call answered late, past other work (a call answered before the late answer, or a human turn, ``turn_start``,
    answered before it), does not take that work in by (d): its unit ends there, and the call and its late answers
    are returned, to be protected with their units, so that they stay paired and in order whatever happens to the
    work between them.
    ``links``: what items open and close by their index, besides their own calls and results (ids the item alone
    does not name: the calls an OpenAI Responses item reference stands for).
    """
    also_opens, also_closes = links
    # An item's own ids as they are when nothing links to it: no new set per item (a windowed scan finds the units
    # of a whole stream, most of its items with no ids: docs/scale.md).
    opened = [opens(item) | also_opens[index] if index in also_opens else opens(item)
              for index, item in enumerate(items)]
    closed = [closes(item) | also_closes[index] if index in also_closes else closes(item)
              for index, item in enumerate(items)]
    answered_by = last_answers(opened, closed)
    between = _Between(items, opened, closed, answered_by, turn_start)
    units: list[Unit] = []
    parted: list[tuple[int, int]] = []  # units whose calls are answered past other work: (start, end)
    i, n = 0, len(items)
    while i < n:
        # A set of its own (an item's ids may be a frozenset), updated in place below: a new set per item was
        # quadratic in the calls open at once.
        pending = set(opened[i])
        pending -= closed[i]
        reach = answered_by[i]
        end = i + 1
        while end < n:
            prev, nxt = items[end - 1], items[end]
            answered = closed[end]
            if not (leads(prev) or same_turn(prev, nxt) or (pending and (opened[end] or answered & pending))):
                if end > reach:
                    break
                if between.other_work(i, end, reach):
                    parted.append((i, end))
                    break
            pending |= opened[end]
            pending -= answered
            reach = max(reach, answered_by[end])
            end += 1
        units.append(Unit(i, end))
        i = end
    return units, _late_pairs(opened, closed, answered_by, parted) if parted else set()


class _Between:
    """Whether what lies between a unit's end and the last late answer of its calls holds other work
    (:meth:`other_work`), in time linear in the items however late the calls are answered (docs/performance.md):
    each question comes at a later item than the one before it, so what an earlier one found is kept."""

    def __init__(self, items: Any, opened: list[set[str]], closed: list[set[str]], answered_by: list[int],
                 turn_start: Callable[[Item], bool]) -> None:
        self.items, self.opened, self.closed, self.answered_by, self.turn_start = (
            items, opened, closed, answered_by, turn_start)
        self.first_answer: list[float] | None = None  # the least answer past its call at or after each item
        self.turn = -1  # the first human turn at or after the last question's start (len(items): none)
        self.unit = -1  # the unit asked about, its calls so far (those of its items before ``calls_to``)
        self.calls: set[str] = set()
        self.calls_to = 0
        self.answering = 0  # every item after ``self.turn`` and before this one answers one of ``self.calls``

    def other_work(self, unit: int, start: int, reach: int) -> bool:
        """Whether ``items[start:reach]`` (what lies before the last late answer, at ``reach``, of the calls of the
        unit starting at ``unit`` and running to ``start``) holds other work: a call answered there, or a human
        turn answered there by something else than answers to the unit's calls (a human turn and the answers to
        the unit's calls only, such as an MCP approval and its response, is not other work)."""
        # A call of an item from ``start`` on answered before ``reach`` (then the call is before ``reach`` too).
        if self.first_answer is None:
            self.first_answer = _first_answers(self.answered_by)
        if self.first_answer[start] < reach:
            return True
        turn = self._turn_from(start)
        if turn + 1 >= reach:
            return False
        if unit != self.unit:
            self.unit, self.calls, self.calls_to, self.answering = unit, set(), unit, 0
        calls, closed = self.calls, self.closed
        for k in range(self.calls_to, start):
            calls |= self.opened[k]
        self.calls_to = start
        # Those answering the unit's calls after an earlier question's turn still do: its calls only grew since.
        k = max(self.answering, turn + 1)
        while k < reach and closed[k] & calls:
            k += 1
        self.answering = k
        return k < reach

    def _turn_from(self, start: int) -> int:
        """The first human turn at or after ``start`` (``start`` at least the last one asked about)."""
        if self.turn >= start:
            return self.turn
        k, n = start, len(self.answered_by)
        while k < n and not self.turn_start(self.items[k]):
            k += 1
        self.turn = k
        return k


def _first_answers(answered_by: list[int]) -> list[float]:
    """For each item, the least index answering a call of it or of an item after it (infinity: none)."""
    least: list[float] = [0.0] * (len(answered_by) + 1)
    least[-1] = float("inf")
    for k in range(len(answered_by) - 1, -1, -1):
        answer = answered_by[k]
        least[k] = answer if k < answer < least[k + 1] else least[k + 1]
    return least


def _late_pairs(opened: list[set[str]], closed: list[set[str]], answered_by: list[int],
                parted: list[tuple[int, int]]) -> set[int]:
    """The items of each unit ``start:end`` of ``parted`` whose calls are answered at ``end`` or later, with those
    answers: one read of the items for all of them (each unit's own read to its last answer was quadratic). An id's
    spans are taken in as the read reaches them and let go once it has passed them (a heap of their ends): an id that
    a harness reuses in every unit has one span per unit, and looking through all of them at each of its answers was
    quadratic too."""
    late: set[int] = set()
    wanted: dict[str, list[tuple[int, int]]] = {}  # call id -> (from, to): the answers to look for, by their from
    for start, end in parted:  # in order: each id's spans come by their from
        for k in range(start, end):
            if answered_by[k] >= end:
                late.add(k)
                for call in opened[k] - closed[k]:
                    wanted.setdefault(call, []).append((end, answered_by[k]))
    first = min(end for _, end in parted)
    last = max((to for spans in wanted.values() for _, to in spans), default=first - 1)
    taken: dict[str, int] = {}  # call id -> how many of its spans the read has reached
    open_until: dict[str, list[int]] = {}  # call id -> the ends of its spans reached and not yet passed (a heap)
    for m in range(first, last + 1):
        for call in closed[m]:
            spans = wanted.get(call)
            if spans is None:
                continue
            ends, at = open_until.setdefault(call, []), taken.get(call, 0)
            while at < len(spans) and spans[at][0] <= m:
                heapq.heappush(ends, spans[at][1])
                at += 1
            taken[call] = at
            while ends and ends[0] < m:
                heapq.heappop(ends)
            if ends:
                late.add(m)
    return late


def last_answers(opened: list[set[str]], closed: list[set[str]]) -> list[int]:
    """For each item, the index of the last item answering a call it opens (before that id is opened
    again, so a harness reusing ids pairs each call with its own answers); the item's own index when
    none of its calls is answered."""
    reach = list(range(len(opened)))
    opened_at: dict[str, int] = {}
    for index, (opens_here, closes_here) in enumerate(zip(opened, closed, strict=True)):
        for call in closes_here:
            if call in opened_at:
                reach[opened_at[call]] = max(reach[opened_at[call]], index)
        for call in opens_here - closes_here:
            opened_at[call] = index
    return reach


def blocks(content: Any) -> list[Item]:
    """The dict blocks of a content list (nothing for a string or another value)."""
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def block_text(content: Any, kinds: tuple[str, ...]) -> str:
    """Text of a content value: a string as it is, else the ``text`` of its blocks of these kinds."""
    if isinstance(content, str):
        return content
    parts = [b.get("text") for b in blocks(content) if b.get("type") in kinds]
    return " ".join(p for p in parts if isinstance(p, str))



def payload_marker(kind: str, data: str) -> str:
    """How the models' view and seal's input show a base64 payload ``data``: ``[<kind>, <N> bytes]``, ``kind`` its
    media type (``image/png``) or what it is (``image``), N the bytes it decodes to; never the base64 itself. Line
    breaks and spaces (MIME's base64 breaks its lines every 76 characters) and the padding decode to nothing."""
    body = data.rstrip().rstrip("=")
    length = len(body)
    for space in _BASE64_SPACES:
        if space in body:  # a fast scan; counted only when there is one
            length -= body.count(space)
    return f"[{kind}, {length * 3 // 4} bytes]"


_BASE64_SPACES = ("\n", "\r", " ", "\t")
PAYLOAD_MARKER = pattern(r"\[[^\[\],]+, \d+ bytes\]")
"""What :func:`payload_marker` writes (the offline summarizer finds it in the view it reads)."""


_DATA_URL = pattern(r"data:([a-z0-9!#$&^_.+-]+/[a-z0-9!#$&^_.+-]+)?((?:;[^;,]*)*);base64,", re.IGNORECASE)
"""A base64 ``data:`` URL's head (RFC 2397): its media type (optional) and parameters, then ``;base64,``."""


_BASE64 = pattern(r"[A-Za-z0-9+/_\-\r\n]*=*\s*")
"""Base64 as a data: URL holds it: the standard and URL-safe alphabets, broken into lines or not, the padding at its
end only. A space ends it (base64 is never broken by one), so a text after the URL on the same line is no payload."""


def _data_url_marker(text: str) -> str | None:
    """:func:`payload_marker` of a base64 ``data:`` URL (its media type, else ``data``), else ``None`` (a text that
    only starts like one, with anything but base64 after its head, stays as it is)."""
    if not text.startswith(("data:", "DATA:", "Data:")):
        return None
    head = _DATA_URL.match(text)
    if head is None or _BASE64.fullmatch(text, head.end()) is None:
        return None
    return payload_marker((head.group(1) or "data").lower(), text[head.end():])


def shown_string(text: str) -> str:
    """``text`` as seal's input shows it: its :func:`payload_marker` when it is a base64 ``data:`` URL as a whole (a
    tool that prints its screenshot so), as the models' view shows it; else ``text`` itself."""
    return (_data_url_marker(text) if len(text) >= _SHORTEST_PAYLOAD else None) or text


def _shown_payload(container: Item, key: str, value: str) -> str | None:
    """The marker standing for ``container[key]`` when that string is a base64 payload a provider's API documents,
    else ``None``: a base64 ``data:`` URL in any field (Chat Completions' ``image_url.url`` and ``file.file_data``,
    the Responses API's ``input_image.image_url``, ``input_file.file_data`` and a computer screenshot's
    ``image_url``); the ``data`` of an Anthropic ``base64`` source (an ``image`` or ``document`` block, a fetched
    PDF); an ``input_file``'s ``file_data`` that is bare base64 (no ``data:`` head). Chat Completions' own parts hold
    theirs one level down (:data:`_INNER_PAYLOADS`)."""
    marker = _data_url_marker(value)
    if marker is not None:
        return marker
    if key == "data" and container.get("type") == "base64":
        media = container.get("media_type")
        return payload_marker(media if isinstance(media, str) and media else "data", value)
    if key == "file_data" and container.get("type") == "input_file":
        return payload_marker("file", value)
    return None


def media_free(value: Any, bare: bool = False) -> Any:
    """``value`` (an item, a content list or block) with each base64 payload in it shown by its marker
    (:func:`_shown_payload`, :func:`payload_marker`): what the models' view holds of an image, a document, a file or
    audio sent inline (docs/formats.md "Images and files"). URLs and file ids stay: short, and they say something.
    Copied only where something is replaced, so ``value`` itself comes back when it holds no payload, and the
    caller's item is never changed. ``bare``: ``value`` is a tool call's input, where a string that is bare base64 as
    a whole is a payload too (:func:`_bare_base64_marker`); so is an Anthropic call block's ``input`` anywhere."""
    if isinstance(value, list):
        copied: list[Any] | None = None
        for index, member in enumerate(value):
            if isinstance(member, (dict, list)):
                shown = media_free(member, bare)
                if shown is not member:
                    if copied is None:
                        copied = list(value)
                    copied[index] = shown
        return value if copied is None else copied
    if not isinstance(value, dict):
        return value
    replaced: dict[str, Any] | None = None
    for key, member in value.items():
        if type(member) is str:
            shown = _shown_payload(value, key, member) if len(member) >= _SHORTEST_PAYLOAD else None
            if bare and shown is None:
                shown = _bare_base64_marker(member)
        elif type(member) is dict and key == value.get("type") and key in _INNER_PAYLOADS:
            shown = _inner_payload(member, *_INNER_PAYLOADS[key])
        elif isinstance(member, (dict, list)):
            shown = media_free(member, bare or key == "input")  # an Anthropic tool_use's (or server tool's) input
            if shown is member:
                shown = None
        else:
            shown = None
        if shown is not None:
            if replaced is None:
                replaced = dict(value)  # the same key order
            replaced[key] = shown
    return value if replaced is None else replaced


def media_free_fields(item: Item, fields: tuple[str, ...]) -> Item:
    """``item`` with :func:`media_free` applied to those of its ``fields`` holding a list or an object (where a
    format puts its content parts), and a field that is a base64 ``data:`` URL itself (a tool's whole output, as a
    text part holding one reads) shown by its marker: ``item`` itself when none holds a payload. A string field is
    only looked at, never walked, so a message whose content is a string costs a lookup (docs/performance.md)."""
    replaced: Item | None = None
    for field in fields:
        value = item.get(field)
        if type(value) is str:
            shown = _data_url_marker(value) if len(value) >= _SHORTEST_PAYLOAD else None
        elif isinstance(value, (list, dict)):
            shown = media_free(value)
            if shown is value:
                shown = None
        else:
            shown = None
        if shown is not None:
            if replaced is None:
                replaced = dict(item)
            replaced[field] = shown
    return item if replaced is None else replaced


def arguments_shown(arguments: Any) -> Any:
    """A tool call's arguments as the models' view shows them (docs/formats.md "Images and files"): each string value
    that is a base64 payload as a whole (a ``data:`` URL, or bare base64: :func:`_bare_base64_marker`) shown by its
    marker, as an agent writing a binary file or uploading an image through a tool sends one. ``arguments``: the
    JSON text of a Chat Completions or Responses call (its string values replaced in the text, the rest of it kept
    as it is), a custom tool's free-form input (a payload as a whole), or an object (an Anthropic ``tool_use``'s
    ``input``). ``arguments`` itself when it holds no payload; a text shorter than :data:`_SHORTEST_BARE_BASE64` is
    not looked at (most calls' arguments: a command, a path)."""
    if type(arguments) is not str:
        return media_free(arguments, True) if isinstance(arguments, (dict, list)) else arguments
    if len(arguments) < _SHORTEST_BARE_BASE64:
        return arguments
    whole = _data_url_marker(arguments) or _bare_base64_marker(arguments)
    if whole is not None:
        return whole
    if _ARGUMENT_PAYLOAD_START.search(arguments) is None:  # the common case, in one fast scan (docs/formats.md)
        return arguments
    shown = _ARGUMENT_STRING.sub(_argument_marker, arguments)
    return arguments if shown is not arguments and shown == arguments else shown  # values found, none a payload


_ARGUMENT_STRING = pattern(r'"((?i:data:[^"\\\s,]*,)?(?:[A-Za-z0-9+/_=-]|\\[rn/]){48,}+)"')
"""A JSON string value in a call's arguments text that may be a base64 payload as a whole: a ``data:`` URL's head
(optional), then base64 only (its line breaks escaped, ``\\/`` for a slash as some encoders write it), up to the
value's closing quote. A match starts only at an opening quote: a closing one is followed by JSON's punctuation,
which base64 does not hold."""


_ARGUMENT_PAYLOAD_START = pattern(r'"(?:[A-Za-z0-9+/_=-]{48}|(?i:data:))')
"""How every value :data:`_ARGUMENT_STRING` finds starts: a search for it scans a call's arguments about three times
faster than the substitution, which runs only where it finds one."""


def _argument_marker(match: re.Match[str]) -> str:
    """The quoted marker of a string value :data:`_ARGUMENT_STRING` found, or the value as it is (no payload)."""
    value = match.group(1)
    if "\\" in value:
        value = value.replace("\\n", "\n").replace("\\r", "\r").replace("\\/", "/")
    marker = _data_url_marker(value) or _bare_base64_marker(value)
    return match.group(0) if marker is None else f'"{marker}"'


_SHORTEST_BARE_BASE64 = 256
"""Bare base64 (no ``data:`` head, in a tool call's input) is a payload from this length on: shorter, its marker
would save little, and a key or a digest may be what the call is about."""
_BASE64_CLASSES = (pattern("[A-Z]"), pattern("[a-z]"), pattern("[0-9]"))


def _bare_base64_marker(text: str) -> str | None:
    """:func:`payload_marker` (``[data, N bytes]``) of ``text`` when it is bare base64 as a whole (the standard or
    URL-safe alphabet, broken into lines or not, padded at its end), of :data:`_SHORTEST_BARE_BASE64` characters or
    more, holding upper case letters, lower case ones and digits, as any base64 of a file does; else ``None``: a hex
    digest, a DNA sequence or a word in capitals is not read as base64."""
    if len(text) < _SHORTEST_BARE_BASE64 or _BASE64.fullmatch(text) is None:
        return None
    if not all(kind.search(text) for kind in _BASE64_CLASSES):
        return None
    return payload_marker("data", text)


_INNER_PAYLOADS = {"input_audio": ("data", "audio"), "file": ("file_data", "file")}
"""Chat Completions' parts holding base64 in an object named as the part's type: ``input_audio`` (``{"data",
"format"}``, its media type ``audio/<format>``) and ``file`` (``{"file_data", "filename"}`` or a ``file_id``;
``file_data`` is bare base64 or a ``data:`` URL): part type -> (field, what it is)."""


def _inner_payload(inner: Item, field: str, kind: str) -> Item | None:
    """``inner`` (a Chat Completions ``input_audio`` or ``file`` object) with its base64 ``field`` shown by its marker,
    the rest walked as any value (:func:`media_free`); ``None`` when nothing is replaced."""
    data = inner.get(field)
    if not isinstance(data, str) or len(data) < _SHORTEST_PAYLOAD:
        shown = media_free(inner)
        return None if shown is inner else shown
    fmt = inner.get("format")
    media = f"{kind}/{fmt}" if kind == "audio" and isinstance(fmt, str) and fmt else kind
    return {**inner, field: _data_url_marker(data) or payload_marker(media, data)}


def inner_payload_shown(inner: Item, field: str, kind: str) -> Item:
    """``inner`` with its base64 ``field`` shown by its marker, its media type ``<kind>/<format>`` when ``inner`` names
    a ``format`` (:func:`_inner_payload`): a Chat Completions assistant message's ``audio`` (``{"id", "data",
    "transcript", "expires_at"}``, as the API returns it). ``inner`` itself when it holds none."""
    shown = _inner_payload(inner, field, kind)
    return inner if shown is None else shown


_SHORTEST_PAYLOAD = 64
"""A string shorter than this stays as it is, whatever it holds: its marker would not be much shorter."""


def media_marker(part: Item) -> str | None:
    """How the seal summarizer's input shows a content part holding no text (docs/formats.md, "Images and files"):
    ``[image]``, ``[file <name>]``, ``[audio]``; ``None`` for any other part."""
    kind = part.get("type")
    if kind in IMAGE_PARTS:
        return "[image]"
    if kind in FILE_PARTS:
        inner = part.get("file")
        names = (part.get("filename"), part.get("title"), inner.get("filename") if isinstance(inner, dict) else None)
        name = next((n for n in names if isinstance(n, str) and n), None)
        return f"[file {name}]" if name else "[file]"
    if kind == "input_audio":
        return "[audio]"
    return None


def shown_text(content: Any, kinds: tuple[str, ...] | None = None) -> str:
    """:func:`block_text` (``kinds`` ``None``: every part with a string ``text``) with each image, file or audio part
    shown by its :func:`media_marker`, and each ``refusal`` part by its ``refusal`` text, in place: what the seal
    summarizer reads of a content value, so that a message holding only an image or a refusal does not read as an
    empty one."""
    if isinstance(content, str):
        return shown_string(content)
    shown = []
    for part in blocks(content):
        text = part.get("text")
        if isinstance(text, str) and (kinds is None or part.get("type") in kinds):
            shown.append(shown_string(text))
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
            shown.append(part["refusal"])  # an assistant's refusal part (Chat Completions, Responses): its text
        elif (marker := media_marker(part)) is not None:
            shown.append(marker)
    return " ".join(shown)
