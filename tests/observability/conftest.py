"""Fixtures for the observability tests: the API handler as Lambda imports it, and readers for what it
writes (Powertools JSON log lines, EMF blobs on stdout)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest


REPO = Path(__file__).resolve().parents[2]
EVENTS = REPO / "tests" / "events"
CORPUS = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_pydicom-901.json"


def api_event(name: str, body: Any) -> dict[str, Any]:
    """``tests/events/<name>.json`` with ``body`` (JSON-encoded) as the request body."""
    event = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
    event["body"] = json.dumps(body)
    return event


def corpus_messages() -> list[dict[str, Any]]:
    data = json.loads(CORPUS.read_text(encoding="utf-8"))
    return data["messages"] if isinstance(data, dict) else data


class Output:
    """What one handler invocation wrote: structured log records and EMF blobs."""

    def __init__(self, module: ModuleType, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]):
        formatter = module.logger.registered_formatter
        printed = capsys.readouterr()
        self.log_text = [formatter.format(record) for record in caplog.records]
        self.logs = [json.loads(line) for line in self.log_text]
        self.printed = printed.out + printed.err
        self.emf = [blob for blob in _json_lines(printed.out) if "_aws" in blob]

    @property
    def everything(self) -> str:
        return "\n".join([*self.log_text, self.printed])

    def billing_lines(self) -> list[dict[str, Any]]:
        return [line for line in self.logs if line.get("record_type") == "billing"]

    def billing(self) -> list[dict[str, Any]]:
        """The ``billing`` objects of the billing lines."""
        return [line["billing"] for line in self.billing_lines()]

    def call_blob(self) -> dict[str, Any]:
        """The one EMF blob carrying the call metrics (dimensions route and mode)."""
        blobs = [blob for blob in self.emf if "route" in blob]
        assert len(blobs) == 1, self.emf
        return blobs[0]


def _json_lines(text: str) -> list[dict[str, Any]]:
    blobs = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                blobs.append(json.loads(line))
            except ValueError:
                continue
    return blobs


def value(blob: dict[str, Any], name: str) -> float:
    """The single value of metric ``name`` in an EMF blob (Powertools writes values as lists)."""
    values = blob[name]
    if isinstance(values, list):
        assert len(values) == 1, values
        return values[0]
    return values


def metric_names(blob: dict[str, Any]) -> set[str]:
    return {metric["Name"] for directive in blob["_aws"]["CloudWatchMetrics"] for metric in directive["Metrics"]}


def dimension_sets(blob: dict[str, Any]) -> list[list[str]]:
    return [sorted(dims) for directive in blob["_aws"]["CloudWatchMetrics"] for dims in directive["Dimensions"]]
