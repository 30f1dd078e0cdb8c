"""Request models of the HTTP API (pydantic). Unknown fields are ignored, as in REFERENCE §1."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from compactor.jsonutil import ensure_utf8_encodable


class CompactRequest(BaseModel):
    """Body of ``POST /v1/compact`` (REFERENCE §1). ``decision_policy_ir`` switches to decision mode."""

    model_config = ConfigDict(extra="ignore")

    messages: list[dict[str, Any]]
    keep_recent: int = 6
    policy_ir: list[Any] | None = None
    max_tokens: int | None = 512
    decision_policy_ir: list[Any] | None = None
    target_ratio: float = Field(default=0.1, gt=0, le=1)
    pinned_indices: list[int] | None = None

    @field_validator("messages")
    @classmethod
    def _valid_unicode(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ensure_utf8_encodable(value)
        return value

    @property
    def decision_mode(self) -> bool:
        return self.decision_policy_ir is not None


class FlowsRequest(BaseModel):
    """Body of ``POST /v1/flows`` (CONTRACT §2)."""

    model_config = ConfigDict(extra="ignore")

    flow_ir: Any
    flow_input: dict[str, Any] | list[Any] | str | None = None

    @field_validator("flow_ir", "flow_input")
    @classmethod
    def _valid_unicode(cls, value: Any) -> Any:
        ensure_utf8_encodable(value)
        return value


class NormalizeRequest(BaseModel):
    """Body of ``POST /v1/flows/normalize``."""

    model_config = ConfigDict(extra="ignore")

    flow_ir: Any
