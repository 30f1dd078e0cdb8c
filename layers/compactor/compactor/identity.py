"""Identities of canonical encodings: SHA-256 identity and the cheap double-hash fingerprint."""

from __future__ import annotations

import hashlib

_M1 = 2147483647
_M2 = 2147483629


def sha256_identity(encoding: str) -> str:
    return hashlib.sha256(encoding.encode("utf-8")).hexdigest()


def fingerprint(encoding: str) -> str:
    """``"<h1>-<h2>"`` with h1 from 5381 (×31 mod 2^31−1) and h2 from 52711 (×37 mod 2147483629)."""
    h1, h2 = 5381, 52711
    for byte in encoding.encode("utf-8"):
        h1 = (h1 * 31 + byte) % _M1
        h2 = (h2 * 37 + byte) % _M2
    return f"{h1}-{h2}"
