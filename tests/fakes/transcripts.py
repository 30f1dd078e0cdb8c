"""Synthetic agent transcripts: a valid conversation of a chosen size, for tests about anything but its content."""

from __future__ import annotations

from typing import Any


def agent_transcript(text: str, turns: int = 6) -> list[dict[str, Any]]:
    """A system prompt, then ``turns`` user/assistant exchanges (``step N: <text>``, ``done N: <text>``)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        messages += [{"role": "user", "content": f"step {turn}: {text}"},
                     {"role": "assistant", "content": f"done {turn}: {text}"}]
    return messages
