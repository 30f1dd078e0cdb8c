"""``openai-responses``: OpenAI Responses API input items (docs/formats.md).

Calls and results are items paired by id: ``function_call`` with ``function_call_output``,
``custom_tool_call`` with ``custom_tool_call_output`` (any ``*_call`` with its ``*_call_output``, by
``call_id``; a ``local_shell_call_output`` names its call's ``call_id`` in its ``id``), and an
``mcp_approval_request`` with the ``mcp_approval_response`` (and the ``mcp_call``) naming it in
``approval_request_id``, a client-executed ``tool_search_call`` with the ``tool_search_output`` echoing its
``call_id`` (a tool search's units are always protected: :data:`TOOL_SEARCH`); a unit holds the calls of one
turn with every output answering them, and whatever lies between. Server-side calls (``mcp_call``,
``web_search_call``, …) carry their results and wait for nothing. A ``reasoning`` item joins the item after
it, and the messages and calls of one response stay together (:func:`_same_response`). ``system`` and
``developer`` messages are always protected, ``user`` messages by default; the request's top-level ``instructions`` are
outside the items and never touched.

``reasoning`` items never reach the models (their summaries would leak into visible text); a unit that
is summarized or archived loses them, which the Responses API allows (a kept call keeps its reasoning,
both are in the same unit). An earlier compaction's item (``compaction``, Codex's ``compaction_summary``)
never reaches them either, and is always protected: nothing could stand in for its encrypted state.
"""

from __future__ import annotations

import json
from typing import Any

from compactor.chat import responses_call_input
from compactor.compaction.units import Unit
from compactor.markers import tool_call_line
from compactor.jsonutil import dense_size
from compactor.formats.base import (Dialect, Item, Placeholder, arguments_shown, media_free_fields, media_marker,
                                   paired_split, payload_marker, shown_string, shown_text)

REASONING = ("reasoning",)
COMPACTION = ("compaction", "compaction_summary")
"""An earlier server-side compaction's state (``encrypted_content``), Codex's name for it second: opaque,
standing for everything before it, so always protected and never read by a model (docs/formats.md)."""
HIDDEN = REASONING + COMPACTION
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text")
CONTENT_PARTS = ("input_text", "input_image", "input_file")  # what a tool output's list may hold
MEDIA_FIELDS = ("content", "output", "outputs")
"""Where an item holds base64 the models' view shows by markers: a message's ``content`` parts, a call output's
``output`` (its parts, or a computer screenshot), a code interpreter's ``outputs``."""

CALL_ARGUMENTS = {"function_call": "arguments", "mcp_call": "arguments", "mcp_approval_request": "arguments",
                  "custom_tool_call": "input"}
"""Where a call item holds what it was asked as text the models' view shows base64 in by markers
(:func:`~compactor.formats.base.arguments_shown`), by the item's type: a function's, an MCP tool's or an MCP approval
request's JSON ``arguments``, a custom tool's free-form ``input``."""

ITEM_REF = "item_reference"
"""An item standing for one the API stored from an earlier response (``{"type": "item_reference", "id": …}``, the
``type`` optional): a call, its reasoning, a message; what it is, the input does not say (:func:`reference_links`)."""


ID_PREFIX_KINDS = {"rs_": "reasoning", "msg_": "message"}
"""What the id of an item reference says of the item it stands for, where the API's id prefix tells: ``rs_`` a
``reasoning`` item, ``msg_`` a message (of any role: the API stores input messages too). Any other id (``fc_`` a
function call, ``ctc_`` a custom one, …, or an id of no known prefix) may be a call, a message or its reasoning."""


def reference_kind(item: Item) -> str | None:
    """``reasoning``, ``message`` (:data:`ID_PREFIX_KINDS`) or ``None`` (anything) for an item reference."""
    ref = item.get("id")
    return next((kind for prefix, kind in ID_PREFIX_KINDS.items() if ref.startswith(prefix)), None) \
        if isinstance(ref, str) else None


def _leads(item: Item) -> bool:
    """A ``reasoning`` item, or a reference standing for one, leads into the item after it (its response's output)."""
    kind = kind_of(item)
    return kind in REASONING or (kind == ITEM_REF and reference_kind(item) == "reasoning")


def kind_of(item: Item) -> str:
    """An item's type; a bare ``{"role", "content"}`` item is a message, a bare ``{"id"}`` item a reference."""
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    if "role" in item:
        return "message"
    return ITEM_REF if isinstance(item.get("id"), str) else ""


TOOL_SEARCH = ("tool_search_call", "tool_search_output")
"""A tool search and its output, whose ``tools`` load deferred tools the later calls use: their units are always
protected whole (docs/formats.md "Deferred tools"). A client-executed search's output answers its ``call_id``."""

SERVER_SIDE_CALLS = ("mcp_call",)
"""Calls that carry their own result (no ``*_call_output`` answers them); other server-side calls
(``web_search_call``, ``file_search_call``, …) have no ``call_id``, so they open nothing either."""

SERVER_OUTPUTS = {"mcp_call": "output", "image_generation_call": "result", "code_interpreter_call": "outputs"}
"""The server-side calls whose own field holds a result mask can replace, in a shape the API accepts back
(docs/formats.md "Item and block types"): an MCP call's string ``output``, an image generation's ``result`` (a string:
the image in base64, megabytes of it), a code interpreter's ``outputs`` (a list of ``logs`` and ``image`` outputs,
which becomes one ``logs`` output holding the placeholder). Such a call is named by its ``id``. A file search's
``results`` and a web search's ``action`` have no text form: they stay."""


def image_marker(result: str) -> str:
    """How the models and seal's input show an image generation's base64 ``result``: its size, never the image."""
    return payload_marker("image", result)


def _opens(item: Item) -> set[str]:
    kind = kind_of(item)
    key = "id" if kind == "mcp_approval_request" else "call_id"
    opened = item.get(key)
    if kind in SERVER_SIDE_CALLS or not (kind.endswith("_call") or kind == "mcp_approval_request"):
        return set()
    return {opened} if isinstance(opened, str) else set()


def answered_call(item: Item) -> str | None:
    """The id of the call (or approval request) ``item`` answers, if it answers one."""
    kind = kind_of(item)
    if kind in ("mcp_approval_response", "mcp_call"):
        answered = item.get("approval_request_id")  # an mcp_call made after its approval names it too
    elif kind == "local_shell_call_output":  # the API reference: its ``id`` is the call's ``call_id``
        answered = item.get("call_id") if isinstance(item.get("call_id"), str) else item.get("id")
    elif kind.endswith("_call_output") or kind == "tool_search_output":
        answered = item.get("call_id")
    else:
        return None
    return answered if isinstance(answered, str) else None


def _closes(item: Item) -> set[str]:
    answered = answered_call(item)
    return {answered} if answered is not None else set()


def _message_role(item: Item) -> Any:
    return item.get("role") if kind_of(item) == "message" else None


def _unknown_reference(item: Item) -> bool:
    """A reference whose id does not say what it stands for (:data:`ID_PREFIX_KINDS`)."""
    return kind_of(item) == ITEM_REF and reference_kind(item) is None


def _response_output(item: Item) -> bool:
    """An item a response outputs besides its reasoning: an assistant message or a call."""
    kind = kind_of(item)
    return _message_role(item) == "assistant" or kind.endswith("_call")


def _same_response(prev: Item, nxt: Item, answered: set[str] | frozenset[str] = frozenset()) -> bool:
    """Items of one response's output: an assistant message, or a call that waits for no output (a server-side
    call carries its result; a call no item of ``answered`` answers, as an interrupted agent leaves one, waits
    for nothing either), followed by another message or call. A response lists them in order after its
    ``reasoning`` item (Codex's preamble message before a call; a ``web_search_call`` before the answer), and
    the API refuses any of them sent back without that reasoning. A call waiting for its output ends the run:
    what follows its output is the next response. A reference whose id does not tell what it stands for may be
    any of a stored response's items: it joins such a reference after it, and nothing else (an item of the input
    is not stored with them; the outputs of a call it stands for join it by :func:`reference_links`), so a run of
    them is one unit of stored items, always protected, apart from the calls and messages around it; one standing
    for reasoning leads into the item after it (:func:`_leads`), one standing for a message (of any role) joins
    nothing by itself."""
    if _unknown_reference(prev) or _unknown_reference(nxt):
        return _unknown_reference(prev) and _unknown_reference(nxt)
    waits_for_nothing = (_message_role(prev) == "assistant"
                         or (kind_of(prev).endswith("_call") and not _opens(prev) & answered))
    return waits_for_nothing and _response_output(nxt)


def reference_links(items: list[Item]) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
    """What the item references of ``items`` open and close, by index (``paired_split``' ``links``): an output
    answering a call that no item before it makes answers the call a reference stands for, the last reference before
    it in its turn (the references before that one join it as one response's items, :func:`_same_response`); a
    reference naming an item of the input answers that item, so the two stay in one unit. Without them, a reference
    and the outputs of its call were units of their own, which decision, seal and a kept tail's start could part."""
    opened: dict[int, set[str]] = {}
    closed: dict[int, set[str]] = {}
    carried = {item["id"]: index for index, item in reversed(list(enumerate(items)))
               if kind_of(item) != ITEM_REF and isinstance(item.get("id"), str)}
    called: set[str] = set()
    last_reference: int | None = None
    for index, item in enumerate(items):
        if kind_of(item) == ITEM_REF:
            last_reference = index
            target = carried.get(item["id"]) if isinstance(item.get("id"), str) else None
            if target is not None and target < index:
                link = f"{ITEM_REF}:{item['id']}"  # apart from call ids
                opened.setdefault(target, set()).add(link)
                closed.setdefault(index, set()).add(link)
            continue
        if _message_role(item) in ("user", "system", "developer"):
            last_reference = None  # a call is answered within its turn
        called |= _opens(item)
        answered = answered_call(item)
        if answered is not None and answered not in called and last_reference is not None:
            opened.setdefault(last_reference, set()).add(answered)
    return opened, closed


class OpenAIResponses(Dialect):
    name = "openai-responses"
    items_field = "input"
    chat_items = False

    def validate(self, items: list[Item]) -> None:
        super().validate(items)
        for index, item in enumerate(items):
            if not kind_of(item):
                raise ValueError(f"input[{index}]: an item needs a 'type' (or a 'role' for a message)")

    def split_units(self, items: list[Item]) -> list[Unit]:
        return self.paired(items)[0]

    def paired(self, items: list[Item]) -> tuple[list[Unit], set[int]]:
        links = reference_links(items)
        answered = {call for item in items if (call := answered_call(item)) is not None}
        return paired_split(items, opens=_opens, closes=_closes, leads=_leads,
                            same_turn=lambda prev, nxt: _same_response(prev, nxt, answered), links=links,
                            turn_start=lambda item: _message_role(item) == "user")

    def always_pinned(self, items: list[Item]) -> set[int]:
        """``system`` and ``developer`` messages, earlier compactions' items, and every item of a unit holding a
        tool search (:data:`TOOL_SEARCH`), so that seal holds such a unit whole after its summary."""
        pinned = {i for i, m in enumerate(items) if _message_role(m) in ("system", "developer")}
        pinned |= self.opaque_state(items)
        pinned |= self.whole_units(items, [kind_of(item) in TOOL_SEARCH for item in items])
        return pinned | self.reference_units(items) | self.late_pairs(items)

    def reference_units(self, items: list[Item]) -> set[int]:
        """Every item of a unit holding nothing but item references: what they stand for is stored with the API,
        not in the input, so a model would judge or summarize nothing but their ids, and a summary or an archive
        would drop those stored items unseen (docs/formats.md "Item references"). A reference that stands with
        an item of the input (the output of the call it stands for, the item it names, the call it may be the
        reasoning of) follows that item's unit instead."""
        if not any(kind_of(item) == ITEM_REF for item in items):
            return set()
        return {i for unit in self.split_units(items) if all(kind_of(items[k]) == ITEM_REF for k in unit.indexes())
                for i in unit.indexes()}

    def opaque_state(self, items: list[Item]) -> set[int]:
        return {i for i, m in enumerate(items) if kind_of(m) in COMPACTION}

    def default_pins(self, items: list[Item]) -> set[int]:
        return {i for i, m in enumerate(items) if _message_role(m) == "user"}

    def model_view(self, items: list[Item]) -> list[Item]:
        """The items but hidden reasoning and earlier compactions; an image generation's base64 ``result`` is shown
        by its size (:func:`image_marker`), and so is every other base64 payload (an ``input_image``'s or a computer
        screenshot's ``data:`` URL, an ``input_file``'s ``file_data``, in :data:`MEDIA_FIELDS`): base64 tells a text
        model nothing, and is megabytes."""
        return [self.media_shown(item) for item in items if kind_of(item) not in HIDDEN]

    def media_shown(self, item: Item) -> Item:
        kind = kind_of(item)
        if kind == "image_generation_call" and isinstance(item.get("result"), str):
            return {**item, "result": image_marker(item["result"])}
        item = media_free_fields(item, MEDIA_FIELDS)
        field = CALL_ARGUMENTS.get(kind)
        if field is not None and (shown := arguments_shown(value := item.get(field))) is not value:
            item = {**item, field: shown}
        return item

    def text_item(self, role: str, text: str) -> Item:
        if role == "assistant":
            return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": text}]}

    def render_line(self, item: Item) -> str:
        kind = kind_of(item)
        if kind == "message":
            return f"{item.get('role')}: {shown_text(item.get('content'), TEXT_PARTS)}"
        if kind.endswith("_call_output"):
            return f"tool: {output_text(item.get('output'))}"
        if kind == "mcp_list_tools":
            tools = item.get("tools")
            names = [t.get("name") for t in tools if isinstance(t, dict)] if isinstance(tools, list) else []
            return f"mcp_list_tools: {item.get('server_label')}: {', '.join(str(n) for n in names)}"
        if kind.endswith("_call") or kind == "mcp_approval_request":
            args = arguments_shown(responses_call_input(item))
            shown = args if isinstance(args, str) else "" if args is None else json.dumps(args, ensure_ascii=False)
            line = f"assistant: {tool_call_line(item.get('name', kind), shown)}"
            if kind == "mcp_approval_request":
                return f"{line} (approval requested)"
            result = server_result(item)
            return line if result is None else f"{line}\ntool: {result}"  # a server-side call carries its result
        if kind == "mcp_approval_response":
            return f"user: {'approved' if item.get('approve') else 'denied'} {item.get('reason') or ''}".rstrip()
        return "" if kind in HIDDEN else f"{kind}: {json.dumps(item, ensure_ascii=False)}"

    def call_names(self, items: list[Item]) -> dict[str, str]:
        names = {item["call_id"]: str(item.get("name", kind_of(item))) for item in items
                 if isinstance(item.get("call_id"), str) and kind_of(item).endswith("_call")}
        # A server-side call carrying its own output is named by its ``id`` (it has no ``call_id``).
        names.update({item["id"]: str(item.get("name", kind_of(item))) for item in items
                      if kind_of(item) in SERVER_OUTPUTS and isinstance(item.get("id"), str)})
        return names

    def masked(self, items: list[Item], index: int, placeholder: Placeholder) -> Item | None:
        """A ``*_call_output`` item, its ids kept, its output replaced in the output's own shape: a string by
        a string, a list of content parts by one ``input_text`` part. An output of another shape (a
        ``computer_call_output``'s screenshot, a ``shell_call_output``'s list of stdout/stderr objects)
        has no valid text form, so the item is kept, as it is when the placeholder would not be smaller. An
        ``mcp_call`` carries its own string ``output``, an ``image_generation_call`` its string ``result``, a
        ``code_interpreter_call`` its ``outputs`` (:data:`SERVER_OUTPUTS`): that field is replaced (a code
        interpreter's outputs by one ``logs`` output; an image's base64 by ``null``, the form the API gives an image
        call without its image: a placeholder string there is not base64, which the API may refuse to decode), the
        call (its ``id``, ``name``, ``arguments``, ``code``, an image's ``revised_prompt``) kept."""
        item = items[index]
        kind = kind_of(item)
        field = SERVER_OUTPUTS.get(kind, "output" if kind.endswith("_call_output") else None)
        if field is None:
            return None
        output = item.get(field)
        call_id = answered_call(item) if field == "output" and kind not in SERVER_OUTPUTS else (
            item.get("id") if isinstance(item.get("id"), str) else None)
        if kind == "code_interpreter_call":
            shape = "logs" if isinstance(output, list) and output else None
        elif kind == "image_generation_call":
            shape = "none" if isinstance(output, str) else None
        elif isinstance(output, str):
            shape = "string"
        elif (isinstance(output, list) and kind not in SERVER_OUTPUTS
              and all(isinstance(p, dict) and p.get("type") in CONTENT_PARTS for p in output)):
            shape = "part"  # a list of content parts becomes one part holding the placeholder
        else:
            return None
        if shape is None:
            return None
        text = placeholder(call_id, output)
        if text is None:
            return None
        replaced = {"string": text, "part": [{"type": "input_text", "text": text}],
                    "logs": [{"type": "logs", "logs": text}], "none": None}[shape]
        if shape == "logs" and dense_size(replaced) >= dense_size(output):
            return None  # a short log: its one ``logs`` output, wrapper and all, would not be smaller
        return {**item, field: replaced}


def server_result(item: Item) -> str | None:
    """What a server-side call's own result says, for seal's input: an MCP call's ``output`` (or ``error``), an image
    generation's image by its size (:func:`image_marker`, never the base64), a code interpreter's logs (an image
    output by ``[image]``), a file search's results (each file's name and text); ``None`` for any other item."""
    kind = kind_of(item)
    if kind in SERVER_SIDE_CALLS:
        return output_text(item.get("output") if item.get("error") is None else item.get("error"))
    if kind == "image_generation_call":
        result = item.get("result")
        return image_marker(result) if isinstance(result, str) else f"[no image: {item.get('status')}]"
    if kind == "code_interpreter_call":
        outputs = item.get("outputs")
        shown = [o["logs"] if isinstance(o.get("logs"), str) else "[image]" if o.get("type") == "image" else ""
                 for o in outputs if isinstance(o, dict)] if isinstance(outputs, list) else []
        return " ".join(text for text in shown if text)
    if kind == "file_search_call":
        results = item.get("results")
        shown = [f"{r.get('filename') or r.get('file_id')}: {r.get('text') or ''}".rstrip()
                 for r in results if isinstance(r, dict)] if isinstance(results, list) else []
        return " ".join(shown)
    return None


def output_text(output: Any) -> str:
    """What a tool output says: a string as it is, else the text of its parts, an image or a file shown by
    a marker (a list of ``input_text`` / ``input_image`` / ``input_file`` parts, or one part such as a
    ``computer_call_output``'s screenshot), a shell call's ``stdout`` / ``stderr``."""
    if isinstance(output, str):
        return shown_string(output)
    parts = output if isinstance(output, list) else [output]
    shown: list[str] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            shown.append(shown_string(part["text"]))
        elif (marker := media_marker(part)) is not None:
            shown.append(marker)
        else:
            shown += [part[k] for k in ("stdout", "stderr") if isinstance(part.get(k), str) and part[k]]
    return " ".join(shown)


DIALECT = OpenAIResponses()
