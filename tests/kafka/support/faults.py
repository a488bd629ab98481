"""Which keys are slow and which records fail, fixed in advance by a hash of key and sequence.

Its own module because both sides need it: the handler processes decide with it
(``journal_handler``, which opens its journal at import and so cannot be imported by a test),
and the chaos harness computes the same to know beforehand which records must end in the DLQ.
"""

from __future__ import annotations

import hashlib

__all__ = ["fault_fraction"]


def fault_fraction(key: bytes | None, seq: int | None = None) -> float:
    """A number in [0, 1) fixed by ``key`` (and ``seq``)."""
    text = (key if key is not None else b"\xff-null") + b"/" + str(seq).encode()
    digest = hashlib.blake2b(text, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64
