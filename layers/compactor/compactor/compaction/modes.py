"""The registry of compaction modes (see docs/behaviour.md, "Compaction modes").

A mode is one module exposing ``MODE``, an object with the three steps of :class:`CompactionMode`;
:data:`REGISTRY` maps each mode's one public name (used by the API's ``mode`` field, the CLI's
``--mode``, the S3 defaults, billing records and metrics) to that module. Adding a mode is one new
module plus one line here. Modules are imported on first use, which keeps cold starts lean.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from compactor.records import record

if TYPE_CHECKING:
    from compactor.budget import Deadline
    from compactor.call_record import CallRecord
    from compactor.models import CompactRequest

PINS_MESSAGE = "pinned_indices must reference existing messages"

REGISTRY: Mapping[str, str] = {
    "seal": "compactor.compaction.seal",
    "decision": "compactor.compaction.decision",
    "mask": "compactor.compaction.mask",
}


@record(frozen=True)
class ModeContext:
    """What a mode may use while it runs: the router, the request's shared deadline, a progress callback
    (the CLI's), the flow runner (the batch fan-out replaces the inline one) and the caller's archive of
    originals (``restorable`` requests, docs/archives.md)."""

    router: Any
    deadline: Deadline
    on_event: Callable[[dict[str, Any]], None] | None = None
    flow_runner: Callable[..., Awaitable[Any]] | None = None
    archive: Any = None


class CompactionMode(Protocol):
    """One compaction mode: ``prepare`` checks and plans without any model call (raising
    ``compactor.errors`` for bad input), ``run`` makes the model calls the plan needs, ``report`` builds
    the typed record of the call: the response body and the facts billing and metrics read."""

    name: str

    def prepare(self, request: CompactRequest, context: ModeContext) -> Any: ...

    async def run(self, plan: Any, context: ModeContext) -> Any: ...

    def report(self, request: CompactRequest, plan: Any, ran: Any) -> CallRecord: ...


def names() -> tuple[str, ...]:
    """The registered mode names, sorted."""
    return tuple(sorted(REGISTRY))


def infer(fields: Mapping[str, Any]) -> str:
    """The mode a request body asks for: its ``mode``, else ``decision`` when it carries a
    ``decision_policy_ir``, else ``seal`` (the inference clients relied on before ``mode`` existed)."""
    named = fields.get("mode")
    if named is not None:
        return str(named)
    return "decision" if fields.get("decision_policy_ir") is not None else "seal"


def refuse_restorable(request: CompactRequest) -> None:
    """A mode that keeps no originals answers ``restorable: true`` with 400 ``restorable_unavailable``
    (docs/archives.md): a caller who asked for the originals to be kept must not lose them silently."""
    from compactor.errors import RestorableUnavailable

    if request.restorable:
        raise RestorableUnavailable("restorable needs decision mode")


def check_max_tokens(request: CompactRequest) -> None:
    """A negative ``max_tokens`` is 400 ``invalid_max_tokens`` in the modes that call a model (0 and null mean
    the default; docs/reliability.md), named as the caller sent it: decision mode refused it as an
    ``invalid_flow`` naming a node of the flow it builds, which the caller never wrote."""
    refuse_negative_max_tokens(request.max_tokens)


def refuse_negative_max_tokens(max_tokens: int | None) -> None:
    """:func:`check_max_tokens` of a ``max_tokens`` alone (windowed runs keep it in their settings)."""
    from compactor.errors import InvalidMaxTokens

    if max_tokens is not None and max_tokens < 0:
        raise InvalidMaxTokens("max_tokens must not be negative")


def check_pins(request: CompactRequest) -> None:
    """``pinned_indices`` must name existing messages (400 otherwise), in the modes that honour pins."""
    from compactor.errors import InvalidRequest

    pins = request.pinned_indices
    if pins is not None and any(i < 0 or i >= len(request.messages) for i in pins):
        raise InvalidRequest(PINS_MESSAGE)


def get(name: str) -> CompactionMode:
    """The registered mode ``name`` (``KeyError`` for an unknown name: requests are validated first)."""
    return importlib.import_module(REGISTRY[name]).MODE
