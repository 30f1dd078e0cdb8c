"""FailPlans: the finite map from an error kind to the failover :class:`Action`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from ..records import record

NEXT_CANDIDATE = "next_candidate"
RETRY_SAME = "retry_same"
NEXT_PROVIDER_SAME_MODEL = "next_provider_same_model"
DISABLE_PROVIDER = "disable_provider"
ABORT = "abort"
UNKNOWN_REASON = "unknown"


@record(frozen=True)
class Action:
    """One admitted Action record (docs/behaviour.md#the-policy-language)."""

    action: str
    then_action: str = NEXT_CANDIDATE
    attempts: int = 1
    backoff_ms: tuple[float, ...] = ()
    open_breaker_ms: float | None = None

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "Action":
        backoff = record.get("backoff_ms", [])
        return cls(
            action=record["action"],
            then_action=record.get("then_action", NEXT_CANDIDATE),
            attempts=int(record.get("attempts", 1)),
            backoff_ms=tuple(float(x) for x in (backoff if isinstance(backoff, list) else [backoff])),
            open_breaker_ms=record.get("open_breaker_ms"),
        )

    def backoff_before_retry(self, retry: int) -> float:
        """Milliseconds to wait before re-issue number ``retry`` (1-based); the last step repeats."""
        if not self.backoff_ms:
            return 0.0
        return self.backoff_ms[min(retry, len(self.backoff_ms)) - 1]


@record(frozen=True)
class FailPlan:
    """``always`` base action plus per-reason overrides."""

    base: Action = field(default_factory=lambda: Action(NEXT_CANDIDATE))
    overrides: Mapping[str, Action] = field(default_factory=dict)

    @classmethod
    def from_term(cls, term: list[Any]) -> "FailPlan":
        """Build from a normal-form FailPlan term."""
        overrides: dict[str, Action] = {}
        while term[0] == "override":
            _, term, reason, record = term
            overrides.setdefault(reason, Action.from_record(record))
        return cls(base=Action.from_record(term[1]), overrides=overrides)

    def action_for(self, error_kind: str | None) -> Action:
        """The override for this kind, else the ``unknown`` override, else the base action."""
        if error_kind is not None and error_kind in self.overrides:
            return self.overrides[error_kind]
        return self.overrides.get(UNKNOWN_REASON, self.base)
