"""The local front doors keep their contracts under abuse (docs/reliability.md): ``compactor serve`` queues
bursts, times out silent clients, answers 413 the client can read, says when its port is taken and when
its catalog is broken; ``compactor compact`` exits 2 on usage and input errors and never overwrites its
input unless told to."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor import http_api
from compactor.catalog import reset_catalog_cache
from compactor.container import reset_router
from compactor_cli import serve
from compactor_cli.main import main

from fakes.local_serve import REPO, running

TRANSCRIPT = [{"role": "system", "content": "You are a coding agent."},
              *[{"role": ("user", "assistant")[i % 2], "content": f"turn {i}: " + "details " * 40} for i in range(10)]]


@pytest.fixture
def server_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.delenv("COMPACTOR_CATALOG", raising=False)
    reset_catalog_cache()
    reset_router()
    with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact")) as url:
        yield url
    reset_catalog_cache()
    reset_router()


def test_the_listen_backlog_takes_a_burst() -> None:
    assert serve.CompactorServer.request_queue_size >= 128


def test_an_oversized_body_gets_a_413_the_client_can_read(server_url: str) -> None:
    body = b"x" * (http_api.MAX_BODY_BYTES + 1)
    request = urllib.request.Request(f"{server_url}/compact", data=body, method="POST",
                                     headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as raised:  # before: BrokenPipeError / ConnectionResetError
        urllib.request.urlopen(request, timeout=60)
    assert raised.value.code == 413
    assert json.loads(raised.value.read())["error"]["code"] == "request_too_large"


def test_a_silent_client_is_disconnected(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert serve._RequestHandler.timeout == serve.READ_TIMEOUT_S <= 60  # the stdlib default waits forever
    monkeypatch.setattr(serve._RequestHandler, "timeout", 0.5)  # the same mechanism, quickly
    host, port = server_url.split("//")[1].split("/")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(b"POST /v1/compact HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{")
        client.settimeout(30)
        assert client.recv(1024) == b""  # the server closed the connection instead of waiting forever


def test_a_taken_port_is_a_clear_message(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "default_template", lambda: tmp_path / "no-template.yaml")  # no env applied
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = main(["serve", "--port", str(port)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err


def test_a_code_dir_without_the_function_is_a_clear_message(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, each worker instance failed to import it: a traceback per worker, then BrokenProcessPool (exit 1)."""
    monkeypatch.setattr(serve, "default_template", lambda: tmp_path / "no-template.yaml")
    code = main(["serve", "--port", "0", "--code-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and f"--code-dir {tmp_path}: no compact.py there" in err and "Traceback" not in err


def test_healthz_is_503_with_the_reason_when_the_catalog_cannot_load(unloadable_catalog: None) -> None:
    with running(serve.create_server(port=0, code_dir=REPO / "functions" / "compact")) as url:
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"{url}/healthz", timeout=30)
    assert raised.value.code == 503
    body = json.loads(raised.value.read())
    assert body["ok"] is False and "invalid JSON" in body["error"]


def test_concurrent_clients_are_all_answered(server_url: str) -> None:
    payload = json.dumps({"messages": TRANSCRIPT, "keep_recent": 2}).encode()
    statuses: list[int] = []

    def call() -> None:
        request = urllib.request.Request(f"{server_url}/compact", data=payload, method="POST",
                                         headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            statuses.append(response.status)

    threads = [threading.Thread(target=call) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert statuses == [200] * 50


# -- compactor compact's exit codes ---------------------------------------------------------------

@pytest.fixture
def transcript_file(tmp_path: Path) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(TRANSCRIPT))
    return path


def test_output_into_a_missing_directory_exits_2(transcript_file: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compact", str(transcript_file), "-q", "-o", str(tmp_path / "missing" / "out.json")])
    err = capsys.readouterr().err
    assert code == 2 and "does not exist" in err and "Traceback" not in err


def test_a_missing_policy_file_exits_2(transcript_file: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["compact", str(transcript_file), "-q", "--decision-policy", f"@{tmp_path / 'missing.json'}"])
    assert exited.value.code == 2 and "cannot read" in capsys.readouterr().err


def test_the_input_is_never_overwritten_unless_forced(transcript_file: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    original = transcript_file.read_text()
    code = main(["compact", str(transcript_file), "-q", "--mode", "seal", "-o", str(transcript_file)])
    assert code == 2 and "--force" in capsys.readouterr().err
    assert transcript_file.read_text() == original
    assert main(["compact", str(transcript_file), "-q", "--mode", "seal", "-o", str(transcript_file),
                 "--force"]) == 0
    assert transcript_file.read_text() != original
