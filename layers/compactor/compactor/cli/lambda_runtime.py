"""A Lambda-like context object for running handlers in-process (``compactor serve`` / ``invoke``)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field


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
