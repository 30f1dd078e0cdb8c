"""``compactor serve`` in-process on a free port, for tests that speak to it over real HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compactor_cli import serve

REPO = Path(__file__).resolve().parents[2]
API_CODE_DIR = REPO / "functions" / "compact"


@contextmanager
def running(server: serve.CompactorServer) -> Iterator[str]:
    """Serve in a background thread; yield the base URL of stage v1; shut down and join on exit."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.url.rstrip("/")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@contextmanager
def api_server(api_key: str | None = None) -> Iterator[str]:
    """The API function served locally (``create_server`` defaults); yields the stage v1 base URL."""
    with running(serve.create_server(port=0, api_key=api_key, code_dir=API_CODE_DIR)) as url:
        yield url
