"""Test certificate authorities and a loopback HTTPS server for the TLS tests (no network): the layer's hashed CA
directory (docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11) built from a test bundle
with the layer's own build step."""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import ssl
import threading
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import certifi
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ca_certificates", REPO / "layers" / "compactor" / "ca_certificates.py")
ca_certificates = importlib.util.module_from_spec(_spec)  # the layer's build step (run by its Makefile)
_spec.loader.exec_module(ca_certificates)  # type: ignore[union-attr]
LOOPBACK = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
CERTIFI = certifi.where()  # certifi's own bundle, whatever a test makes ``certifi.where`` answer later


def _certificate(subject: str, key: Any, issuer: x509.Name, issuer_key: Any, *, authority: bool,
                 names: list[x509.GeneralName] | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
               .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=authority, path_length=None), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                              critical=False))
    if authority:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=False, content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False),
            critical=True)
    else:
        builder = (builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.SubjectAlternativeName(names or []), critical=False))
    return builder.sign(issuer_key, hashes.SHA256())


class Authority:
    """A test certificate authority, which signs server certificates."""

    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.certificate = _certificate(name, self.key, self.name, self.key, authority=True)
        self.pem = self.certificate.public_bytes(serialization.Encoding.PEM)

    def server(self, directory: Path, names: list[x509.GeneralName]) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = _certificate("server", key, self.name, self.key, authority=False, names=names)
        cert_file, key_file = directory / "server.crt", directory / "server.key"
        cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cert_file, key_file


def bundle_with(path: Path, *authorities: Authority) -> Path:
    """certifi's bundle with ``authorities`` appended, at ``path``."""
    path.write_bytes(Path(CERTIFI).read_bytes().rstrip(b"\n") + b"\n" + b"".join(a.pem for a in authorities))
    return path


def certifi_certificates() -> list[x509.Certificate]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one of certifi's roots has a serial number cryptography frowns on
        return x509.load_pem_x509_certificates(Path(CERTIFI).read_bytes())


def built_layer(root: Path, *authorities: Authority) -> tuple[Path, Path]:
    """A built layer's bundle (certifi's plus ``authorities``, at ``root/certifi/cacert.pem``) and its hashed
    directory (``root/compactor/ca-certificates``), made by the layer's build step."""
    (root / "certifi").mkdir(parents=True)
    bundle = bundle_with(root / "certifi" / "cacert.pem", *authorities)
    directory = root / "compactor" / "ca-certificates"
    assert ca_certificates.build(bundle, directory)
    return bundle, directory


class JSONAnswer(BaseHTTPRequestHandler):
    """Answers every POST with ``{}`` as JSON (DynamoDB's GetItem of a missing item, a provider's empty answer)."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class HTTPSServers:
    """Loopback HTTPS servers, each with a certificate of a given authority; :meth:`close` stops them all."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.servers = directory, []

    def start(self, authority: Authority, names: list[x509.GeneralName] | None = None) -> str:
        directory = self.directory / f"server{len(self.servers)}"
        directory.mkdir()
        cert_file, key_file = authority.server(directory, names or LOOPBACK)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        server = ThreadingHTTPServer(("127.0.0.1", 0), JSONAnswer)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)
        return f"https://127.0.0.1:{server.server_address[1]}"

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


class VerifyLoads:
    """Every ``SSLContext.load_verify_locations`` call's ``(cafile, capath)``, once :meth:`install`-ed."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, Any]] = []

    def install(self, monkeypatch: Any) -> list[tuple[Any, Any]]:
        stock = ssl.SSLContext.load_verify_locations
        seen = self.seen

        def load_verify_locations(self: ssl.SSLContext, cafile: Any = None, capath: Any = None,
                                  cadata: Any = None) -> Any:
            seen.append((cafile, capath))
            return stock(self, cafile, capath, cadata)

        monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", load_verify_locations)
        return seen
