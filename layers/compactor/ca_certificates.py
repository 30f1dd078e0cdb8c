"""Make an OpenSSL hashed CA directory of the layer's CA bundle (run by the Makefile at build time, never
shipped; docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11).

Usage: ``python ca_certificates.py BUNDLE DIRECTORY`` (BUNDLE: the ``cacert.pem`` the layer's botocore and httpx
verify with, certifi's; DIRECTORY: where the hashed directory goes, replaced whole).

Each certificate of the bundle becomes one PEM file named ``<subject hash>.<n>`` (what ``openssl rehash`` names
it: OpenSSL's hash of the certificate's subject, ``n`` counting certificates whose subjects hash alike), so that
``SSLContext.load_verify_locations(capath=DIRECTORY)`` trusts exactly the bundle's certificates while OpenSSL
reads only the issuers a handshake's chain needs, when it needs them, instead of parsing the whole bundle into
every new connection's context. ``manifest.json`` names the bundle (its path relative to DIRECTORY), its size,
its sha256, the number of certificates and the digest of the certificate files written
(:func:`compactor.ca_directory.files_digest`): :mod:`compactor.ca_directory` uses the directory only for that
exact file, and only while the directory holds exactly those files. The hashes come from ``openssl rehash`` (OpenSSL >= 1.1) or ``c_rehash``; the files are written
here, in a fixed order with fixed contents, so that two builds of one bundle are byte-identical. With neither
tool the script prints a warning and makes no directory (the functions then load the bundle as botocore does):
a deploy never fails for this.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from compactor.ca_directory import MANIFEST, files_digest  # the layer's own package, beside this script
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.DOTALL)
_HASHED = re.compile(r"^[0-9a-f]{8}\.\d+$")


def certificates(bundle: bytes) -> list[bytes]:
    """The bundle's certificates, each as its PEM block (``\\n`` line ends, a final newline), in the bundle's
    order, each once (a certificate repeated, even wrapped otherwise, is kept the first time)."""
    seen: set[bytes] = set()
    found = []
    for block in _PEM.findall(bundle):
        der = base64.b64decode(b"".join(block.split()[2:-2]))  # between the BEGIN and END lines
        if der not in seen:
            seen.add(der)
            found.append(block.replace(b"\r\n", b"\n") + b"\n")
    return found


def rehash_tool() -> list[str] | None:
    """The command that hashes a directory of certificates: ``openssl rehash`` when this OpenSSL has it, else
    ``c_rehash``; None without either."""
    openssl = shutil.which("openssl")
    if openssl and subprocess.run([openssl, "rehash", "-h"], capture_output=True).returncode == 0:
        return [openssl, "rehash"]
    c_rehash = shutil.which("c_rehash")
    return [c_rehash] if c_rehash else None


def subject_hashes(pems: list[bytes], tool: list[str]) -> list[str] | None:
    """Each certificate's subject hash, as ``tool`` names its file in a directory holding them all; None (with a
    warning) when the tool fails or leaves a certificate unnamed."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        for index, pem in enumerate(pems):
            (work / f"cert{index:04d}.pem").write_bytes(pem)
        done = subprocess.run([*tool, str(work)], capture_output=True, text=True)
        hashes: dict[bytes, str] = {}
        for entry in work.iterdir():  # links (or copies) named <hash>.<n>, to the files above
            if _HASHED.match(entry.name):
                hashes[entry.read_bytes()] = entry.name.split(".")[0]
    missing = [index for index, pem in enumerate(pems) if pem not in hashes]
    if done.returncode != 0 or missing:
        print(f"warning: ca_certificates.py: {' '.join(tool)} failed ({done.returncode}) or named no file for "
              f"certificates {missing[:5]}: the layer ships no hashed CA directory\n{done.stderr[-500:]}",
              file=sys.stderr)
        return None
    return [hashes[pem] for pem in pems]


def build(bundle: Path, directory: Path, tool: list[str] | None = None) -> bool:
    """Write the hashed directory of ``bundle`` at ``directory`` (replacing whatever was there); False, with a
    warning and no directory, when no rehash tool exists."""
    tool = tool or rehash_tool()
    if directory.exists():
        shutil.rmtree(directory)
    if tool is None:
        print("warning: ca_certificates.py: neither `openssl rehash` nor `c_rehash` found: the layer ships no "
              "hashed CA directory, and each new HTTPS connection loads the whole CA bundle (docs/performance.md)",
              file=sys.stderr)
        return False
    data = bundle.read_bytes()
    pems = certificates(data)
    hashes = subject_hashes(pems, tool)
    if hashes is None:
        return False
    directory.mkdir(parents=True)
    counts: dict[str, int] = {}
    # Certificates whose subjects hash alike are numbered in the bundle's order (OpenSSL tries .0, .1, ...).
    for pem, subject_hash in zip(pems, hashes):
        number = counts.get(subject_hash, 0)
        counts[subject_hash] = number + 1
        (directory / f"{subject_hash}.{number}").write_bytes(pem)
    manifest = {"bundle": os.path.relpath(bundle.resolve(), directory.resolve()), "certificates": len(pems),
                "files_sha256": files_digest(str(directory)), "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data)}
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    build(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
