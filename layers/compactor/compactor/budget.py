"""Wall-clock budgets: one :class:`Deadline` shared by everything a request does."""

from __future__ import annotations

import time
from typing import Any

from compactor.records import record

DEFAULT_FLOW_BUDGET_MS = 40_000
# Time kept back from the Lambda context so the handler can still answer after the flow stops.
LAMBDA_SAFETY_MARGIN_MS = 1_500


@record(frozen=True)
class Deadline:
    """An absolute point on the monotonic clock."""

    expires_at: float

    @classmethod
    def after_ms(cls, budget_ms: float) -> "Deadline":
        return cls(time.monotonic() + budget_ms / 1000.0)

    def remaining_s(self) -> float:
        return max(0.0, self.expires_at - time.monotonic())

    def remaining_ms(self) -> int:
        return int(self.remaining_s() * 1000)

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.expires_at

    def cap(self, timeout_s: float | None) -> float:
        """The smaller of ``timeout_s`` and the time left."""
        left = self.remaining_s()
        return left if timeout_s is None else min(left, timeout_s)


def flow_budget_ms(env: dict[str, str] | None = None, lambda_context: Any = None) -> int:
    """``COMPACTOR_FLOW_BUDGET_MS`` (default 40 000) or the Lambda's remaining time minus a margin,
    whichever is smaller."""
    import os

    source = os.environ if env is None else env
    try:
        budget = int(source.get("COMPACTOR_FLOW_BUDGET_MS", DEFAULT_FLOW_BUDGET_MS))
    except ValueError:
        budget = DEFAULT_FLOW_BUDGET_MS
    if budget <= 0:
        budget = DEFAULT_FLOW_BUDGET_MS
    if lambda_context is not None and hasattr(lambda_context, "get_remaining_time_in_millis"):
        left = int(lambda_context.get_remaining_time_in_millis()) - LAMBDA_SAFETY_MARGIN_MS
        budget = max(0, min(budget, left))
    return budget
