"""The layer's CA bundle as an OpenSSL hashed directory, for the HTTPS clients that verify with that bundle
(docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11).

``SSLContext.load_verify_locations(cafile=...)`` parses every certificate of the file into the context: certifi's
``cacert.pem`` (117 certificates) costs 23-70 ms of CPU on a Lambda-sized machine, and botocore (through urllib3)
does it for every new connection. ``load_verify_locations(capath=...)`` of a directory holding the same
certificates one per file, each named by its subject's hash (``openssl rehash``), costs about 1.5 ms: OpenSSL then
reads, while it verifies a chain, only the issuer certificates it looks up by hash. The same certificates are
trusted, and how strictly is the context's and the connection's (``CERT_REQUIRED``, host name checks), not the CA
source's.

The layer's build (``layers/compactor/Makefile``, ``ca-certificates``) writes :data:`DIRECTORY` with a manifest
naming the bundle it was made from, its size and its sha256, and the digest of the directory's own certificate
files (:func:`files_digest`: their names and bytes). :func:`hashed_directory` answers the directory for exactly
that file, and only while the file's bytes and the directory's files are the manifest's (read once per container
and path, about 1.8 ms with the files' digest); for any other path (``AWS_CA_BUNDLE``, a client's
``verify=<path>``), a file changed since the build, a certificate file added to, changed in or missing from the
directory, a missing or unreadable manifest (a checkout: the directory exists only in the built layer), it
answers None and the caller loads the file as it always did.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading

DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ca-certificates")
"""Where the layer's build puts the hashed directory (absent in a checkout)."""
MANIFEST = "manifest.json"

_checked: dict[tuple[str, str], str | None] = {}
_lock = threading.Lock()


def hashed_directory(bundle: str) -> str | None:
    """:data:`DIRECTORY` when it was built from the file ``bundle`` names (the same path, resolved) and that file
    still holds the bytes the manifest describes; else None (load ``bundle`` itself)."""
    key = (DIRECTORY, bundle)
    try:
        return _checked[key]
    except KeyError:
        pass
    with _lock:
        if key not in _checked:
            _checked[key] = _check(DIRECTORY, bundle)
        return _checked[key]


def _check(directory: str, bundle: str) -> str | None:
    try:
        with open(os.path.join(directory, MANIFEST), "rb") as file:
            manifest = json.loads(file.read())
        named = os.path.join(directory, manifest["bundle"])
        if os.path.realpath(named) != os.path.realpath(bundle):
            return None
        with open(bundle, "rb") as file:
            data = file.read()
        if len(data) != manifest["size"] or hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            return None
        if files_digest(directory) != manifest["files_sha256"]:  # what OpenSSL will read is what was built
            return None
    except (OSError, ValueError, KeyError, TypeError):  # no directory (a checkout), or no usable manifest
        return None
    return directory


def files_digest(directory: str) -> str:
    """The sha256 of every file of ``directory`` but the manifest, by name order: each name, its size and its
    bytes (the build writes it into the manifest; a file added, removed, renamed or changed gives another)."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(directory)):
        if name == MANIFEST:
            continue
        with open(os.path.join(directory, name), "rb") as file:
            data = file.read()
        digest.update(b"%s\0%d\0" % (name.encode("utf-8", "surrogateescape"), len(data)))
        digest.update(data)
    return digest.hexdigest()


def forget() -> None:
    """Check every path again on its next use (tests)."""
    with _lock:
        _checked.clear()
