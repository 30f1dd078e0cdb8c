"""A transcript read as a stream, in windows (docs/scale.md), is cut into the units one request cuts it into when it
reads it whole, in both windowed formats: whatever the windows' bounds, on random transcripts holding calls answered
late, parallel calls, results of no call and calls never answered. And the scan that reads it finds the pins,
protected units, recent evidence, instructions and budget one request's preparation finds."""

from __future__ import annotations

import random
from typing import Any

import pytest

from compactor.compaction import windows as windows_module
from compactor.compaction.preparation import prepare
from compactor.compaction.preset import question_template
from compactor.compaction.units import instruction_pins
from compactor.compaction.windows import Settings, scan, task_units, windows
from compactor.formats import get_dialect

from scale import transcripts

from .conftest import decision_policy

SHAPES = {"openai-chat": transcripts.random_chat, "anthropic-messages": transcripts.random_anthropic}


@pytest.mark.parametrize("fmt", list(SHAPES))
def test_a_windowed_read_cuts_the_units_a_whole_read_cuts(monkeypatch, fmt):
    """Windows of a few hundred bytes (a window closes at ``WINDOW_MAX_BYTES``), so most units start a window: the
    units each window compacts (``task_units``), one window after another, are the dialect's units of the whole."""
    monkeypatch.setattr(windows_module, "WINDOW_MAX_BYTES", 400)
    dialect = get_dialect(fmt)
    rng = random.Random(fmt)
    cut = 0
    for _ in range(600):
        items = SHAPES[fmt](rng)
        settings = Settings(format=fmt, keep_recent=rng.choice([1, 3, 6]), decision_policy_ir=decision_policy())
        context = scan(iter(items), settings, reread=lambda: iter(items))
        tasks = list(windows(iter(items), context, settings))
        cut += len(tasks) > 1
        assert [unit for task in tasks for unit in task_units(task)] == dialect.split_units(items), items
        assert [m for task in tasks for m in task["messages"]] == items
    assert cut > 300  # most transcripts were read in several windows


@pytest.mark.parametrize("fmt", list(SHAPES))
@pytest.mark.parametrize("bounded", [False, True])
def test_the_scan_finds_what_one_requests_preparation_finds(fmt, bounded):
    dialect = get_dialect(fmt)
    rng = random.Random(f"{fmt}{bounded}")
    for _ in range(300):
        items = SHAPES[fmt](rng)
        keep, pins = rng.choice([1, 3, 6]), rng.choice([None, None, [0], [len(items) // 2]])
        settings = Settings(format=fmt, keep_recent=keep, bounded_tail=bounded, decision_policy_ir=decision_policy(),
                            pinned_indices=None if pins is None else tuple(pins))
        context = scan(iter(items), settings, reread=lambda: iter(items))
        prep = prepare(items, keep_recent=keep, target_ratio=settings.target_ratio, pinned_indices=pins,
                       question_template=question_template(), dialect=dialect, bounded=bounded)
        found: dict[str, Any] = {"pins": sorted(context.pins), "bytes": context.input_bytes,
                                 "target": context.target_bytes, "budget": context.budget,
                                 "recent": context.recent_evidence, "instructions": context.instructions,
                                 "protected": {u.id for u in prep.units if context.protected(u)}}
        expected = {"pins": instruction_pins(items, pins, dialect), "bytes": prep.original_bytes,
                    "target": prep.target_bytes, "budget": prep.budget, "recent": prep.recent_evidence,
                    "instructions": prep.instructions, "protected": prep.protected}
        assert found == expected, items
