"""Shared pieces of the windowed-compaction tests: a deterministic router and a transcript of
corpus sessions large enough for several windows."""

from __future__ import annotations

from typing import Any

import pytest

from compactor.compaction.preset import load_preset

from scale import transcripts
from s3.conftest import gave_up_module, s3_module  # noqa: F401  (the S3 handlers' fixtures, shared)


def decision_policy() -> Any:
    return load_preset()["flow"][1]["classify"]["policy"]


@pytest.fixture(scope="session")
def sessions() -> list[dict[str, Any]]:
    """About 1.5 MB of corpus sessions (several windows of 128 candidates)."""
    return list(transcripts.messages(1_500_000))
