"""The JSON lines a function's Powertools logger writes, read as its formatter writes them."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def lines_written(logger: Any) -> Iterator[list[dict[str, Any]]]:
    """Collect what ``logger`` (a Powertools ``Logger``) writes inside the block, when it is written (not read back
    from ``caplog``), formatted by the logger's own formatter. The list is filled when the block ends."""
    written = io.StringIO()
    handler = logging.StreamHandler(written)
    handler.setFormatter(logger.registered_formatter)
    logging.getLogger(logger.name).addHandler(handler)
    lines: list[dict[str, Any]] = []
    try:
        yield lines
    finally:
        logging.getLogger(logger.name).removeHandler(handler)
        lines.extend(json.loads(line) for line in written.getvalue().splitlines())
