"""Request models of the HTTP API (pydantic). Unknown fields are ignored (docs/behaviour.md#requests-and-responses).

Types are strict (``"6"``, ``true`` or ``6.0`` are not a ``keep_recent``), numbers have ranges, and list
validation stops at the first bad element, so a 422 costs little whatever the body (docs/reliability.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from compactor.jsonutil import ensure_utf8_encodable


MAX_KEEP_RECENT = 10**9
"""``keep_recent`` range is ±this (any value below 1 means 1)."""
MAX_OUTPUT_TOKENS = 1_000_000
"""Largest ``max_tokens`` accepted; a model's own limit is usually far lower."""
MAX_INDEX = 10**9
"""Largest ``pinned_indices`` element accepted (out-of-range indices are the reference's 400)."""


def _encodable(value: Any) -> Any:
    ensure_utf8_encodable(value)
    return value


Unicode = AfterValidator(_encodable)
"""Marks a field that may hold caller text: a lone surrogate in it is a 422 (docs/behaviour.md#requests-and-responses).
Every such field of every body carries it, except those whose type refuses the surrogate already (``format``,
``mode``). Only ``messages`` and the flow fields once did: a lone surrogate in ``policy_ir`` was answered 500,
when the admission error quoting it could not be encoded."""


class CompactRequest(BaseModel):
    """Body of ``POST /v1/compact``: ``mode`` names the compaction mode (absent: ``decision`` when
    ``decision_policy_ir`` is present, else ``seal``; docs/behaviour.md, "Compaction modes").

    ``messages`` holds the items of ``format`` (docs/formats.md); ``openai-responses`` sends them as
    ``input``, its own name, and gets them back under it."""

    model_config = ConfigDict(extra="ignore", strict=True)

    format: Literal["openai-chat", "anthropic-messages", "openai-responses"] = "openai-chat"
    # Out of the repr: Powertools formats a route's arguments into a debug message on every request,
    # which for a 900 KB transcript cost 2-4 ms, and a transcript has no place in a log line.
    # Read from ``input`` for openai-responses (the before-validator lets only that format use it), so that a
    # 422 names the field the caller sent: ``input``, ``input[3]``.
    messages: Annotated[list[dict[str, Any]], Unicode] = Field(
        fail_fast=True, repr=False, validation_alias=AliasChoices("messages", "input"))
    restorable: bool = False
    keep_recent: int = Field(default=6, ge=-MAX_KEEP_RECENT, le=MAX_KEEP_RECENT)
    policy_ir: Annotated[list[Any] | None, Unicode] = None
    max_tokens: int | None = Field(default=512, ge=-MAX_OUTPUT_TOKENS, le=MAX_OUTPUT_TOKENS)
    decision_policy_ir: Annotated[list[Any] | None, Unicode] = None
    target_ratio: float = Field(default=0.1, gt=0, le=1, allow_inf_nan=False)
    pinned_indices: list[Annotated[int, Field(ge=-MAX_INDEX, le=MAX_INDEX)]] | None = Field(default=None,
                                                                                          fail_fast=True)
    mode: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _items_under_their_name(cls, data: Any) -> Any:
        if isinstance(data, dict):
            named = data.get("format")
            if "format" not in data and "input" in data and "messages" not in data:
                # Items under ``input`` in a body naming no format are Responses items, as the CLI and the S3 path
                # read such a body (docs/formats.md, "Validation"); the API answered 422 "messages: Field required".
                data = {**data, "format": "openai-responses"}
                named = "openai-responses"
            if named == "openai-responses":
                if "messages" in data:
                    raise ValueError("openai-responses items go in 'input', not 'messages'")
                if "input" not in data:  # missing: named as the format names it
                    raise PydanticCustomError("missing", "Field required: openai-responses items go in 'input'")
            elif "input" in data:  # another format's request ignores an ``input`` field, as any unknown one
                if "messages" not in data and named in ("openai-chat", "anthropic-messages"):
                    raise ValueError(f"{named} items go in 'messages', not 'input'")  # the CLI's words
                data = {k: v for k, v in data.items() if k != "input"}
        return data

    @model_validator(mode="after")
    def _valid_items(self) -> CompactRequest:
        from compactor.formats import get_dialect

        get_dialect(self.format).validate(self.messages)
        return self

    @field_validator("mode")
    @classmethod
    def _registered_mode(cls, value: str | None) -> str | None:
        from compactor.compaction.modes import names

        if value is not None and value not in names():
            raise ValueError(f"mode must be one of: {', '.join(names())}")
        return value

    @property
    def mode_name(self) -> str:
        """The compaction mode this request runs in (``mode``, else inferred: docs/behaviour.md)."""
        from compactor.compaction.modes import infer

        return infer({"mode": self.mode, "decision_policy_ir": self.decision_policy_ir})


COMPACT_FIELDS = tuple(name for name in CompactRequest.model_fields if name != "messages")
"""The request fields of ``POST /v1/compact`` besides ``messages``."""


# The bodies of the other routes build their validators on first use (``defer_build``), not at import:
# the API function's cold start answers one route (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
class FlowsRequest(BaseModel):
    """Body of ``POST /v1/flows`` (docs/behaviour.md#requests-and-responses)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    flow_ir: Annotated[Any, Unicode]
    flow_input: Annotated[dict[str, Any] | list[Any] | str | None, Unicode] = Field(
        default=None, repr=False)  # as CompactRequest.messages


class NormalizeRequest(BaseModel):
    """Body of ``POST /v1/flows/normalize``."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    flow_ir: Annotated[Any, Unicode]


class ExpandRequest(BaseModel):
    """Body of ``POST /v1/expand`` (docs/archives.md)."""

    model_config = ConfigDict(extra="ignore", strict=True, defer_build=True)

    handles: Annotated[list[str], Unicode] = Field(min_length=1, max_length=256, fail_fast=True)
