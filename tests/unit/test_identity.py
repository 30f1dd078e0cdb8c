from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.identity import fingerprint, sha256_identity


def _reference(encoding: str) -> str:
    h1, h2 = 5381, 52711
    for byte in encoding.encode("utf-8"):
        h1 = (h1 * 31 + byte) % 2147483647
        h2 = (h2 * 37 + byte) % 2147483629
    return f"{h1}-{h2}"


def test_empty_and_known_values():
    assert fingerprint("") == "5381-52711"
    assert fingerprint("a") == f"{5381 * 31 + 97}-{52711 * 37 + 97}"


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(max_size=12_000))
def test_chunked_evaluation_matches_the_byte_loop(text):
    assert fingerprint(text) == _reference(text)


def test_chunk_boundaries():
    for size in (4095, 4096, 4097, 8192, 10_000):
        text = "é" * (size // 2) + "x" * (size % 2)
        assert fingerprint(text) == _reference(text)


def test_largest_bytes_stay_exact_in_floating_point():
    # 0xF4 and 0xBF are about the largest bytes UTF-8 has: the chunk sums come closest to 2**53 here
    for text in ("\U0010FFFF" * 3000, "\U0010FFFF" * 1024 + "\u07FF" * 7):
        assert fingerprint(text) == _reference(text)


def test_sha256_identity():
    assert sha256_identity("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_pure_python_dot_product_fallback_agrees(monkeypatch):
    from compactor import identity

    text = "fallback é" * 1000
    monkeypatch.setattr(identity, "_dot", identity._sumprod)
    assert fingerprint(text) == _reference(text)


def test_weight_tables_equal_the_integer_definition():
    from compactor import identity

    for base, modulus, table in ((31, 2147483647, identity._W1), (37, 2147483629, identity._W2)):
        expected = tuple(float(pow(base, identity._CHUNK - 1 - i, modulus)) for i in range(identity._CHUNK))
        assert table == expected
