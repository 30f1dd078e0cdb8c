"""A ``moto`` S3 server on 127.0.0.1 that answers every request L milliseconds late, in a process of its own
(its work is not the measured process's CPU or interpreter lock): S3's round trip for the benchmarks whose
subject is how many of them a caller waits for in turn (``tests/benchmarks/archives.py``, ``windowed_job.py``),
and with a rate (``--mb-per-s``) also moves bodies as one S3 connection does (``streamed_write.py``).

The server is threaded, so requests in flight wait side by side, as S3's do. It closes every connection, as
werkzeug's server does, so each request also connects, where S3 keeps connections alive.

Run alone: ``python tests/fakes/slow_s3.py --latency-ms L [--mb-per-s R]`` prints the port and serves until stdin
closes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

CHUNK = 1 << 20


def serve(latency_s: float, bytes_per_s: float | None) -> None:
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)

    def transfer_s(size: str | None) -> float:  # a request's body in, whole before it is answered
        return int(size or 0) / bytes_per_s if bytes_per_s else 0.0

    def late(environ: dict[str, Any], start_response: Any) -> Any:
        time.sleep(latency_s + transfer_s(environ.get("CONTENT_LENGTH")))  # the request's body in
        body = app(environ, start_response)
        return paced(body) if bytes_per_s else body

    def paced(body: Any) -> Iterator[bytes]:
        """The answer's body a chunk at a time, each when the rate would have carried it: a reader parses the
        first megabytes of a large object while the rest are on their way, as from S3."""
        try:
            for data in body:
                for start in range(0, len(data), CHUNK):
                    chunk = data[start:start + CHUNK]
                    time.sleep(len(chunk) / bytes_per_s)  # type: ignore[operator]
                    yield chunk
        finally:
            if hasattr(body, "close"):
                body.close()

    server = make_server("127.0.0.1", 0, late, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


class SlowS3:
    """The server in a child process; entering points this process's AWS settings at it (test credentials,
    ``AWS_ENDPOINT_URL_S3``, no proxy) and returns its endpoint; leaving restores them. With ``mb_per_s``, each
    request's body and each answer's body also take their size at that rate (one connection's throughput: S3's
    performance guidelines plan one request per 85-90 MB/s), so a request of 8 MB takes about 0.1 s more."""

    def __init__(self, latency_ms: float, mb_per_s: float | None = None) -> None:
        self.latency_ms, self.mb_per_s = latency_ms, mb_per_s

    def __enter__(self) -> str:
        rate = ["--mb-per-s", str(self.mb_per_s)] if self.mb_per_s else []
        self.process = subprocess.Popen([sys.executable, __file__, "--latency-ms", str(self.latency_ms), *rate],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port = int(self.process.stdout.readline())  # type: ignore[union-attr]
        endpoint = f"http://127.0.0.1:{port}"
        self.saved = dict(os.environ)
        for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                            ("AWS_SESSION_TOKEN", "testing"), ("AWS_DEFAULT_REGION", "us-east-1"),
                            ("AWS_REGION", "us-east-1"), ("AWS_ENDPOINT_URL_S3", endpoint)):
            os.environ[name] = value
        for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy",
                     "ALL_PROXY", "all_proxy"):
            os.environ.pop(name, None)
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
        return endpoint

    def __exit__(self, *exc: object) -> None:
        os.environ.clear()
        os.environ.update(self.saved)
        self.process.stdin.close()  # type: ignore[union-attr]
        self.process.wait(timeout=30)


def add_options(parser: argparse.ArgumentParser, *, mb_per_s: float | None = 90.0) -> None:
    """A benchmark's options for this server: ``--latency-ms`` (default 25, S3's round trip) and ``--mb-per-s``
    (default ``mb_per_s``; none: bodies are not paced)."""
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--mb-per-s", type=float, default=mb_per_s)


def from_options(options: argparse.Namespace) -> SlowS3:
    """The server :func:`add_options` describes."""
    return SlowS3(options.latency_ms, options.mb_per_s)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, required=True)
    parser.add_argument("--mb-per-s", type=float, default=None)
    options = parser.parse_args()
    serve(options.latency_ms / 1000, options.mb_per_s * 1e6 if options.mb_per_s else None)
