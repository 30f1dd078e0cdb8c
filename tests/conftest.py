"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.provider_server import FakeProviderServer


@pytest.fixture
def fake_provider() -> Iterator[FakeProviderServer]:
    """A running fake OpenAI-compatible / native-decisions provider on 127.0.0.1.

    Point offers at ``fake_provider.base_url``; script answers with ``enqueue(Reply(...))`` or
    ``responder``; assert on ``fake_provider.requests``. See ``tests/fakes/provider_server.py``.
    """
    with FakeProviderServer() as server:
        yield server
