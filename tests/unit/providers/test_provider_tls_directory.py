"""The pooled provider client verifies with the layer's hashed CA directory when, and only when, httpx would
load the very bundle it was built from (compactor.providers.http.tls_context, compactor.ca_directory;
docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11). Against a loopback HTTPS server with
test authorities: no network."""

from __future__ import annotations

import ipaddress
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import certifi
import pytest
from cryptography import x509

from compactor import ca_directory
from compactor.providers import http
from compactor.providers.base import ProviderError
from compactor.providers.shards import ShardedTransport
from fakes.tls_authority import Authority, HTTPSServers, VerifyLoads, bundle_with, built_layer, ca_certificates

pytestmark = pytest.mark.skipif(ca_certificates.rehash_tool() is None, reason="neither openssl rehash nor c_rehash")


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                 "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    ca_directory.forget()
    yield
    ca_directory.forget()


@pytest.fixture()
def https(tmp_path: Path) -> Iterator[HTTPSServers]:
    servers = HTTPSServers(tmp_path)
    yield servers
    servers.close()


@pytest.fixture()
def loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    return VerifyLoads().install(monkeypatch)


def layer(monkeypatch: pytest.MonkeyPatch, root: Path, *authorities: Authority) -> tuple[Path, Path]:
    """A built layer's bundle and hashed directory, as certifi's bundle and the directory the core reads."""
    bundle, directory = built_layer(root, *authorities)
    monkeypatch.setattr(certifi, "where", lambda: str(bundle))
    monkeypatch.setattr(ca_directory, "DIRECTORY", str(directory))
    return bundle, directory


async def post(url: str) -> http.HttpReply:
    """One call through a new pooled client (its TLS context made for it)."""
    await http.aclose_client()
    try:
        return await http.post_json(url + "/v1/decisions", {}, headers={}, timeout_s=10, max_body_bytes=1000)
    finally:
        await http.aclose_client()


async def test_certifis_bundle_is_read_from_its_hashed_directory(tmp_path, monkeypatch, https, loads) -> None:
    authority = Authority("hashed test authority")
    _, directory = layer(monkeypatch, tmp_path / "layer", authority)
    url = https.start(authority)
    await http.aclose_client()
    transport = http.client()._transport
    assert isinstance(transport, ShardedTransport)
    contexts = {id(shard._pool._ssl_context) for shard in transport._shards}
    assert len(contexts) == 1  # one context for every shard
    reply = await post(url)
    assert reply.status == 200 and json.loads(reply.body) == {}
    assert loads == [(None, str(directory))] * 2  # the client above and post's: the directory, never the file


async def test_an_authority_left_out_of_the_directory_is_not_trusted(tmp_path, monkeypatch, https, loads) -> None:
    _, directory = layer(monkeypatch, tmp_path / "layer")
    with pytest.raises(ProviderError, match="CERTIFICATE_VERIFY_FAILED"):
        await post(https.start(Authority("left-out test authority")))
    assert loads == [(None, str(directory))]


async def test_a_certificate_for_another_host_is_refused(tmp_path, monkeypatch, https, loads) -> None:
    authority = Authority("hashed test authority")
    layer(monkeypatch, tmp_path / "layer", authority)
    url = https.start(authority, [x509.DNSName("elsewhere.example"), x509.IPAddress(ipaddress.ip_address("127.0.0.2"))])
    with pytest.raises(ProviderError, match="CERTIFICATE_VERIFY_FAILED"):
        await post(url)


async def test_ssl_cert_file_is_loaded_as_httpx_loads_it(tmp_path, monkeypatch, https, loads) -> None:
    authority = Authority("operator's test authority")
    layer(monkeypatch, tmp_path / "layer", authority)
    url = https.start(authority)
    with_it, without = bundle_with(tmp_path / "with.pem", authority), bundle_with(tmp_path / "without.pem")
    monkeypatch.setenv("SSL_CERT_FILE", str(with_it))
    assert (await post(url)).status == 200
    assert loads == [(str(with_it), None)]
    monkeypatch.setenv("SSL_CERT_FILE", str(without))
    with pytest.raises(ProviderError, match="CERTIFICATE_VERIFY_FAILED"):
        await post(url)
    assert loads[1:] == [(str(without), None)]


@pytest.mark.parametrize("change", ["manifest", "no directory"])
async def test_a_directory_not_of_the_bundle_falls_back_to_the_file(tmp_path, monkeypatch, https, loads,
                                                                    change) -> None:
    authority = Authority("hashed test authority")
    bundle, directory = layer(monkeypatch, tmp_path / "layer", authority)
    manifest = directory / ca_directory.MANIFEST
    if change == "manifest":
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "sha256": "0" * 64}))
    else:
        shutil.rmtree(directory)
    assert (await post(https.start(authority))).status == 200
    assert loads == [(str(bundle), None)]
