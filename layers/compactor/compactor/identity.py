"""Identities of canonical encodings: SHA-256 identity and the cheap double-hash fingerprint."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from itertools import accumulate, repeat
from operator import mul

from compactor.stored_values import value

_M1, _B1, _S1 = 2147483647, 31, 5381
_M2, _B2, _S2 = 2147483629, 37, 52711
_CHUNK = 4096


def _weights(base: int, modulus: int, chunk: int) -> tuple[float, ...]:
    """``base**(chunk-1-i) mod modulus`` for i in 0..chunk-1: a chunk's bytes as one polynomial step.

    As floats, and still exact: a weight is below 2**31 and a byte below 2**8, so every product and every
    partial sum of a chunk (below 4096 * 2**39 = 2**51) is an integer a double holds exactly (2**53).
    Computed in floats as well, by ``accumulate``: a weight times a base below 2**6 stays below 2**37, so
    each step's product and remainder are exact, and this runs about three times faster than the integer
    loop at every cold start (docs/performance.md)."""
    step, mod = float(base), float(modulus)
    weights = list(accumulate(repeat(None, chunk - 1), lambda weight, _: weight * step % mod, initial=1.0))
    weights.reverse()
    return tuple(weights)


# Stored by the built layer (compactor.stored_values, by these arguments and _weights' code): computing both
# costs 1.4 ms at every cold start.
_W1 = value("identity.weights", (_B1, _M1, _CHUNK), _weights)
_W2 = value("identity.weights", (_B2, _M2, _CHUNK), _weights)


def _sumprod(values: bytes, weights: Iterable[float]) -> float:
    return sum(map(mul, values, weights))


# math.sumprod (Python 3.12+) does the chunk's multiply-add in C, about ten times faster; on float weights it
# takes its floating-point path, about twice as fast as its integer one (docs/performance.md).
_dot = getattr(math, "sumprod", _sumprod)


def sha256_identity(encoding: str) -> str:
    return hashlib.sha256(encoding.encode("utf-8")).hexdigest()


def _poly_hash(data: bytes, seed: int, base: int, modulus: int, weights: tuple[float, ...]) -> int:
    """``h = (h*base + b) mod modulus`` over every byte, evaluated a chunk at a time (same result)."""
    h, whole = seed, len(data) - len(data) % _CHUNK
    step = pow(base, _CHUNK, modulus)
    for start in range(0, whole, _CHUNK):  # whole chunks take the weights as they are, without a slice
        h = (h * step + int(_dot(data[start:start + _CHUNK], weights))) % modulus
    if whole < len(data):
        rest = len(data) - whole
        h = (h * pow(base, rest, modulus) + int(_dot(data[whole:], weights[_CHUNK - rest:]))) % modulus
    return h


def fingerprint(encoding: str) -> str:
    """``"<h1>-<h2>"`` with h1 from 5381 (×31 mod 2^31−1) and h2 from 52711 (×37 mod 2147483629)."""
    data = encoding.encode("utf-8")
    return f"{_poly_hash(data, _S1, _B1, _M1, _W1)}-{_poly_hash(data, _S2, _B2, _M2, _W2)}"
