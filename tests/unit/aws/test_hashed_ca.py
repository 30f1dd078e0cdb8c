"""The container's AWS clients verify with the layer's hashed CA directory when, and only when, their bundle is
the one it was built from (compactor.ca_directory, compactor_aws.aws_session;
docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11). Against a local HTTPS server answering
DynamoDB-shaped requests, with test authorities made here: no network."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.config
import botocore.exceptions
import botocore.httpsession
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from compactor import ca_directory
from compactor_aws import aws_session
from fakes.tls_authority import (
    Authority, HTTPSServers, VerifyLoads, built_layer, bundle_with, ca_certificates, certifi_certificates,
)

NEEDS_OPENSSL = pytest.mark.skipif(ca_certificates.rehash_tool() is None, reason="neither openssl rehash nor c_rehash")
pytestmark = NEEDS_OPENSSL


@pytest.fixture()
def https(tmp_path: Path) -> Iterator[Any]:
    """Start a local HTTPS server with a certificate of ``authority`` for ``names``; answers its URL."""
    servers = HTTPSServers(tmp_path)
    yield servers.start
    servers.close()


@pytest.fixture()
def loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """Every ``load_verify_locations`` call's ``(cafile, capath)``."""
    return VerifyLoads().install(monkeypatch)


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
                        "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_DYNAMODB"):
        monkeypatch.delenv(name, raising=False)
    ca_directory.forget()
    yield
    ca_directory.forget()


def layer(monkeypatch: pytest.MonkeyPatch, root: Path, *authorities: Authority) -> tuple[Path, Path]:
    """A built layer's bundle (certifi's plus ``authorities``) and its hashed directory, as the default bundle
    botocore resolves (``certifi.where``, which botocore imported as its ``where``) and the directory
    :mod:`compactor.ca_directory` reads."""
    bundle, directory = built_layer(root, *authorities)
    monkeypatch.setattr(botocore.httpsession, "where", lambda: str(bundle))
    monkeypatch.setattr(ca_directory, "DIRECTORY", str(directory))
    return bundle, directory


def get_item(url: str, **kwargs: Any) -> Any:
    client = aws_session.client("dynamodb", endpoint_url=url,
                                config=botocore.config.Config(retries={"total_max_attempts": 1}), **kwargs)
    return client, client.get_item(TableName="t", Key={"k": {"S": "v"}})


def test_the_default_bundle_is_read_from_its_hashed_directory(tmp_path, monkeypatch, https, loads) -> None:
    authority = Authority("hashed test authority")
    bundle, directory = layer(monkeypatch, tmp_path / "layer", authority)
    client, answer = get_item(https(authority))
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert type(client._endpoint.http_session) is aws_session.HashedCASession
    assert loads == [(None, str(directory))]  # the directory, never the file


def test_an_authority_left_out_of_the_directory_is_not_trusted(tmp_path, monkeypatch, https, loads) -> None:
    _, directory = layer(monkeypatch, tmp_path / "layer")
    with pytest.raises(botocore.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        get_item(https(Authority("left-out test authority")))
    assert loads == [(None, str(directory))]


def test_a_certificate_for_another_host_is_refused(tmp_path, monkeypatch, https, loads) -> None:
    authority = Authority("hashed test authority")
    _, directory = layer(monkeypatch, tmp_path / "layer", authority)
    url = https(authority, [x509.DNSName("elsewhere.example"), x509.IPAddress(ipaddress.ip_address("127.0.0.2"))])
    with pytest.raises(botocore.exceptions.SSLError, match="hostname '127.0.0.1' doesn't match"):
        get_item(url)
    assert loads == [(None, str(directory))]


@pytest.mark.parametrize("how", ["AWS_CA_BUNDLE", "verify"])
def test_a_custom_bundle_is_loaded_as_botocore_loads_it(tmp_path, monkeypatch, https, loads, how) -> None:
    authority = Authority("custom test authority")
    layer(monkeypatch, tmp_path / "layer", authority)  # the layer's bundle trusts it too: not what is used
    url = https(authority)
    with_it = bundle_with(tmp_path / "with.pem", authority)
    without = bundle_with(tmp_path / "without.pem")

    def call(bundle: Path) -> Any:
        if how == "AWS_CA_BUNDLE":
            monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
            return get_item(url)
        return get_item(url, verify=str(bundle))

    client, answer = call(with_it)
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert type(client._endpoint.http_session) is botocore.httpsession.URLLib3Session
    assert loads == [(str(with_it), None)]
    with pytest.raises(botocore.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        call(without)
    assert loads[1:] == [(str(without), None)]


def test_a_copy_of_the_layers_bundle_elsewhere_takes_botocores_path(tmp_path, monkeypatch, https, loads) -> None:
    authority = Authority("hashed test authority")
    bundle, _ = layer(monkeypatch, tmp_path / "layer", authority)
    copy = Path(shutil.copy(bundle, tmp_path / "copy.pem"))  # the same bytes, another file
    client, _ = get_item(https(authority), verify=str(copy))
    assert type(client._endpoint.http_session) is botocore.httpsession.URLLib3Session
    assert loads == [(str(copy), None)]


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_verify_false_connects_without_verifying(tmp_path, monkeypatch, https, loads) -> None:
    layer(monkeypatch, tmp_path / "layer")
    client, answer = get_item(https(Authority("untrusted test authority")), verify=False)
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert type(client._endpoint.http_session) is botocore.httpsession.URLLib3Session
    assert loads == []


@pytest.mark.parametrize("change", ["manifest", "bundle", "no manifest", "no directory", "file added",
                                    "file changed", "file removed"])
def test_a_directory_not_of_the_bundle_falls_back_to_the_file(tmp_path, monkeypatch, https, loads, change) -> None:
    authority = Authority("hashed test authority")
    bundle, directory = layer(monkeypatch, tmp_path / "layer", authority)
    manifest = directory / ca_directory.MANIFEST
    certificate_files = sorted(path for path in directory.iterdir() if path != manifest)
    if change == "file added":  # a certificate the build did not write, even one of the bundle's, is not read
        (directory / "00000000.0").write_bytes(certificate_files[0].read_bytes())
    elif change == "file changed":
        certificate_files[-1].write_bytes(certificate_files[-1].read_bytes().replace(b"-----\n", b"-----\n\n", 1))
    elif change == "file removed":
        certificate_files[0].unlink()
    elif change == "manifest":
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "sha256": "0" * 64}))
    elif change == "bundle":  # rewritten after the build, same size
        data = bundle.read_bytes()
        bundle.write_bytes(data.replace(b"Certificate", b"Certifikate", 1))
        assert len(bundle.read_bytes()) == len(data)
    elif change == "no manifest":
        manifest.unlink()
    else:
        shutil.rmtree(directory)
    client, answer = get_item(https(authority))
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert type(client._endpoint.http_session) is botocore.httpsession.URLLib3Session
    assert loads == [(str(bundle), None)]


def test_the_directory_is_checked_once_per_path(tmp_path, monkeypatch) -> None:
    bundle, directory = layer(monkeypatch, tmp_path / "layer")
    assert ca_directory.hashed_directory(str(bundle)) == str(directory)
    bundle.write_bytes(b"changed after the first check")
    assert ca_directory.hashed_directory(str(bundle)) == str(directory)  # the container's first answer
    ca_directory.forget()
    assert ca_directory.hashed_directory(str(bundle)) is None


def _der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


@pytest.mark.filterwarnings("ignore:Parsed a serial number")  # one of certifi's roots
def test_the_directory_holds_exactly_the_bundles_certificates_by_subject_hash(tmp_path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl")
    extra = Authority("hashed test authority")
    bundle = bundle_with(tmp_path / "cacert.pem", extra, extra)  # a repeated certificate is kept once
    directory = tmp_path / "hashed"
    assert ca_certificates.build(bundle, directory)
    files = sorted(path for path in directory.iterdir() if path.name != ca_directory.MANIFEST)
    expected = {c.public_bytes(serialization.Encoding.DER) for c in x509.load_pem_x509_certificates(bundle.read_bytes())}
    assert {_der(path.read_bytes()) for path in files} == expected
    assert len(files) == len(expected) == len(certifi_certificates()) + 1
    for path in files:
        subject_hash = subprocess.run([openssl, "x509", "-noout", "-subject_hash", "-in", str(path)],
                                      capture_output=True, text=True, check=True).stdout.strip()
        assert path.name.split(".")[0] == subject_hash
    manifest = json.loads((directory / ca_directory.MANIFEST).read_text())
    assert manifest["certificates"] == len(files) and manifest["size"] == len(bundle.read_bytes())
    assert manifest["files_sha256"] == ca_directory.files_digest(str(directory))
    assert (directory / manifest["bundle"]).resolve() == bundle.resolve()


def test_no_rehash_tool_ships_no_directory(tmp_path, monkeypatch, capsys) -> None:
    bundle = bundle_with(tmp_path / "cacert.pem")
    directory = tmp_path / "hashed"
    directory.mkdir()
    monkeypatch.setattr(ca_certificates, "rehash_tool", lambda: None)
    assert ca_certificates.build(bundle, directory) is False
    assert not directory.exists() and "warning" in capsys.readouterr().err
