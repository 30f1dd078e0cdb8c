"""The generic typed flow runtime (Σ_flow ``sigma-flow/v1`` with typed extensions, docs/behaviour.md#the-flow-ir).

A flow is a finite DAG of ``input``, ``data``, ``decision``, ``llm`` and ``output`` nodes. It is
admitted whole before any effect (:func:`admit_flow`), identified canonically (:func:`normalize_flow`)
and executed concurrently under one shared deadline (:func:`run_flow`).
"""

from __future__ import annotations

from typing import Any

from .admit import AdmissionCache, FlowAdmissionError, admit_flow
from .canonical import VERSION, normalized_term
from .execute import FlowRouter, NodeOutcome, execute_node
from .graph import AdmittedFlow, FlowNode
from .result import FlowResult
from .scheduler import run_flow
from .values import MISSING


def normalize_flow(admitted: AdmittedFlow) -> dict[str, Any]:
    """``{"flow_ir", "encoded", "fingerprint", "version"}`` of an admitted flow (no inference)."""
    return {"flow_ir": normalized_term(admitted), "encoded": admitted.encoding,
            "fingerprint": admitted.fingerprint, "version": VERSION}


__all__ = [
    "MISSING",
    "VERSION",
    "AdmissionCache",
    "AdmittedFlow",
    "FlowAdmissionError",
    "FlowNode",
    "FlowResult",
    "FlowRouter",
    "NodeOutcome",
    "admit_flow",
    "execute_node",
    "normalize_flow",
    "run_flow",
]
