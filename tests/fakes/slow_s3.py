"""A ``moto`` S3 server on 127.0.0.1 that answers every request L milliseconds late, in a process of its own
(its work is not the measured process's CPU or interpreter lock): S3's round trip for the benchmarks whose
subject is how many of them a caller waits for in turn (``tests/benchmarks/archives.py``, ``windowed_job.py``).

The server is threaded, so requests in flight wait side by side, as S3's do. It closes every connection, as
werkzeug's server does, so each request also connects, where S3 keeps connections alive.

Run alone: ``python tests/fakes/slow_s3.py --latency-ms L`` prints the port and serves until stdin closes.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import Any


def serve(latency_s: float) -> None:
    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = DomainDispatcherApplication(create_backend_app)

    def late(environ: dict[str, Any], start_response: Any) -> Any:
        time.sleep(latency_s)
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, late, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


class SlowS3:
    """The server in a child process; entering points this process's AWS settings at it (test credentials,
    ``AWS_ENDPOINT_URL_S3``, no proxy) and returns its endpoint; leaving restores them."""

    def __init__(self, latency_ms: float) -> None:
        self.latency_ms = latency_ms

    def __enter__(self) -> str:
        self.process = subprocess.Popen([sys.executable, __file__, "--latency-ms", str(self.latency_ms)],
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, required=True)
    serve(parser.parse_args().latency_ms / 1000)
