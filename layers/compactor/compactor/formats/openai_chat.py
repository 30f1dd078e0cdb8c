"""``openai-chat``: OpenAI Chat Completions messages, the default format (docs/formats.md).

A unit is an assistant message with ``tool_calls`` and the ``tool`` messages right after it (or with a
legacy ``function_call`` and the ``function`` message answering it), or any other single message;
``system`` and ``developer`` messages are always protected, ``user`` messages by default (except a text
agent's tool observations, docs/differences.md).
"""

from __future__ import annotations

from typing import Any

from compactor.chat import audio_transcript, call_function, content_text, is_tool_result, role_of
from compactor.markers import tool_call_line
from compactor.compaction.units import ALWAYS_PINNED_ROLES, Unit, is_text_observation, split_units
from compactor.formats.base import (Dialect, Item, Placeholder, arguments_shown, inner_payload_shown,
                                   media_free_fields, shown_string, shown_text)

# What a model reads of a Chat Completions message (docs/formats.md): the fields of the format, an assistant's
# ``audio`` reply among them (its ``transcript`` is what was said; its base64 ``data`` reads as its marker:
# :meth:`OpenAIChat.media_shown`). What a harness stores beside them (raw provider responses, timings, costs,
# DeepSeek's hidden ``reasoning_content``) never reaches the decision or summary models.
MODEL_FIELDS = frozenset({"role", "name", "content", "refusal", "audio", "tool_calls", "tool_call_id",
                          "function_call"})
CALL_FIELDS = frozenset({"id", "type", "function", "custom"})  # ``custom``: a custom tool's call (its name, input)


def _model_call(call: object) -> object:
    return {k: v for k, v in call.items() if k in CALL_FIELDS} if isinstance(call, dict) else call


def _left_as_is(item: dict) -> bool:
    """Whether :func:`model_message` leaves nothing out of ``item`` (the common case)."""
    for key, value in item.items():
        if key not in MODEL_FIELDS or (value is None and key not in ("role", "content")):
            return False
    calls = item.get("tool_calls")
    return not isinstance(calls, list) or all(not isinstance(c, dict) or c.keys() <= CALL_FIELDS for c in calls)


def model_message(item: Item) -> Item:
    """``item`` with only the format's fields, in their order; empty optional fields (``null``) dropped.
    ``item`` itself when that leaves nothing out (no copy of every message per request, docs/performance.md)."""
    if not isinstance(item, dict) or _left_as_is(item):
        return item
    view: Item = {}
    for key, value in item.items():
        if key not in MODEL_FIELDS or (value is None and key not in ("role", "content")):
            continue
        view[key] = [_model_call(c) for c in value] if key == "tool_calls" and isinstance(value, list) else value
    return view


def calls_shown(calls: list[Any]) -> list[Any]:
    """``tool_calls`` with each call's ``function.arguments`` (or a custom tool's ``custom.input``) as the models'
    view shows them (:func:`arguments_shown`): ``calls`` itself when none holds base64."""
    copied: list[Any] | None = None
    for index, call in enumerate(calls):
        if type(call) is not dict:
            continue
        field, key = ("function", "arguments") if "function" in call else ("custom", "input")
        inner = call.get(field)
        if type(inner) is not dict:
            continue
        value = inner.get(key)
        if (shown := arguments_shown(value)) is not value:
            if copied is None:
                copied = list(calls)
            copied[index] = {**call, field: {**inner, key: shown}}
    return calls if copied is None else copied


class OpenAIChat(Dialect):
    name = "openai-chat"
    items_field = "messages"

    def split_units(self, items: list[Item]) -> list[Unit]:
        return split_units(items)

    def always_pinned(self, items: list[Item]) -> set[int]:
        return {i for i, m in enumerate(items) if role_of(m) in ALWAYS_PINNED_ROLES}

    def default_pins(self, items: list[Item]) -> set[int]:
        return {i for i, m in enumerate(items) if role_of(m) == "user" and not is_text_observation(items, i)}

    def model_view(self, items: list[Item]) -> list[Item]:
        """Each message's chat fields (:func:`model_message`), its base64 payloads shown by their markers."""
        return [self.media_shown(model_message(item)) for item in items]

    def media_shown(self, item: Item) -> Item:
        """The ``content`` parts' base64 (an ``image_url`` part's ``data:`` URL, ``input_audio``, a ``file`` part's
        ``file_data``) shown by markers, and so is the base64 in a tool call's arguments (:func:`calls_shown`) and an
        assistant's ``audio.data`` (its ``transcript``, ``id`` and ``expires_at`` stay)."""
        if not isinstance(item, dict):
            return item
        item = media_free_fields(item, ("content",))
        calls = item.get("tool_calls")
        if calls and type(calls) is list and (shown := calls_shown(calls)) is not calls:
            item = {**item, "tool_calls": shown}
        legacy = item.get("function_call")
        if legacy and type(legacy) is dict:
            arguments = legacy.get("arguments")
            if (shown := arguments_shown(arguments)) is not arguments:
                item = {**item, "function_call": {**legacy, "arguments": shown}}
        audio = item.get("audio")  # an assistant's audio reply as the API returns it, its base64 ``data`` beside its id
        if audio and type(audio) is dict and (shown := inner_payload_shown(audio, "data", "audio")) is not audio:
            item = {**item, "audio": shown}
        return item

    def text_item(self, role: str, text: str) -> Item:
        return {"role": role, "content": text}

    def render_line(self, item: Item) -> str:
        """``<role>: <content>``, an audio reply as ``[audio]`` and its transcript, tool calls rendered after the
        content."""
        content = item.get("content") if isinstance(item, dict) else None
        text = (shown_text(content) if isinstance(content, (list, str)) else content_text(content)) if isinstance(
            item, dict) else str(item)
        spoken = audio_transcript(item)
        if spoken is not None:  # a voice reply: what was said (its ``content`` is null), never its base64
            spoken = f"[audio] {spoken}" if spoken else "[audio]"
            text = f"{text} {spoken}" if text else spoken
        calls = item.get("tool_calls") if isinstance(item, dict) else None
        for call in calls if isinstance(calls, list) else []:
            function = call_function(call)  # a function's call, or a custom tool's
            if function is not None:
                text += "\n" + tool_call_line(function.get("name"), arguments_shown(function.get("arguments")))
        refusal = item.get("refusal") if isinstance(item, dict) else None
        if isinstance(refusal, str) and refusal not in text:  # an assistant's refusal beside (or instead of) content
            text = f"{text} {refusal}" if text else refusal
        legacy = item.get("function_call") if isinstance(item, dict) else None
        if isinstance(legacy, dict):  # the deprecated single call, answered by a ``function`` message
            text += "\n" + tool_call_line(legacy.get("name"), arguments_shown(legacy.get("arguments")))
        return f"{role_of(item)}: {text}"

    def call_names(self, items: list[Item]) -> dict[str, str]:
        names: dict[str, str] = {}
        for item in items:
            calls = item.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                # A call that is not an object (``[null]``) names nothing; it is kept as it is, in every mode.
                if not isinstance(call, dict):
                    continue
                function = call_function(call)  # a function's call, or a custom tool's
                if isinstance(call.get("id"), str) and function is not None:
                    names[call["id"]] = str(function.get("name"))
        return names

    def masked(self, items: list[Item], index: int, placeholder: Placeholder) -> Item | None:
        """A ``tool`` message (or a legacy ``function`` one), or a text agent's observation (a ``user`` message
        answering the assistant)."""
        item = items[index]
        # A string is a valid content whatever the output was (a string or a list of parts).
        if is_tool_result(item):
            call_id, name = item.get("tool_call_id"), item.get("name")  # a legacy ``function`` message: its name
            text = placeholder(call_id if isinstance(call_id, str) else None, item.get("content"),
                               name if isinstance(name, str) and role_of(item) == "function" else None)
        elif is_text_observation(items, index):
            text = placeholder(None, item.get("content"))
        else:
            return None
        return None if text is None else {**item, "content": text}


DIALECT = OpenAIChat()
