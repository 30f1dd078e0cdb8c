"""What ``compactor serve`` and ``compactor invoke`` borrow from the Lambda runtime: a context object and
the way a handler string (``module.function``) is imported from the function's code directory."""

from __future__ import annotations

import importlib
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LambdaHandler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LocalLambdaContext:
    """The attributes and the one method handlers read from the real Lambda context.

    The remaining time counts down on the monotonic clock from ``timeout_s`` at creation.
    """

    function_name: str
    timeout_s: float
    memory_limit_in_mb: int = 1024
    region: str = "us-east-1"
    function_version: str = "$LATEST"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    _started: float = field(default_factory=time.monotonic, repr=False)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:123456789012:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"local/{self.aws_request_id}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout (never negative)."""
        elapsed = time.monotonic() - self._started
        return max(0, int((self.timeout_s - elapsed) * 1000))


def load_handler(code_dir: Path, handler: str, extra_paths: list[Path] | tuple[Path, ...] = ()) -> LambdaHandler:
    """Import ``handler`` (``module.function``) the way Lambda does: ``code_dir`` first on ``sys.path``,
    then the layers' directories (``extra_paths``)."""
    module_name, _, function_name = handler.rpartition(".")
    if not module_name:
        raise ValueError(f"handler {handler!r} is not of the form module.function")
    for path in reversed([code_dir, *extra_paths]):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    module = importlib.import_module(module_name)
    return getattr(module, function_name)
