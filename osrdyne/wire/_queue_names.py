"""Request-queue names every AMQP client accepts, whatever the worker key.

Worker keys are any UTF-8 (routing keys), but queue names are not: pamqp (under aio-pika, the
most used asyncio client) refuses any name outside `[a-zA-Z0-9-_.:@#,/+ ]` before it reaches
the broker, and other clients may be as strict. A request queue is therefore named after its
key in a reversible encoding into that alphabet (docs/protocol.md gives it exactly, so other
implementations can compute and recognise it):

* **readable form**: each UTF-8 byte of the key that is an ASCII letter, a digit or one of
  `- _ . : @ , /` stays as it is; every other byte becomes `+` and two upper-case hex digits
  (`infra=42` -> `infra+3D42`, `é` -> `+C3+A9`, `+` -> `+2B`). Common keys stay readable,
  and keys made only of kept characters keep the name osrdyne 0.1 gave them.
* **hashed form**, when the readable name would pass 255 bytes: the longest start of the
  encoded key that fits without splitting an escape, `#`, and the first 32 hex digits of the
  SHA-256 of the key. A readable name never contains `#` (it is escaped), so the two forms
  cannot collide; the raw key is kept in the queue argument `x-osrdyne-key`, which every
  request queue osrdyne declares carries, so the name can always be read back.

Bindings keep the raw key: an encoded binding key would never match what clients publish.
"""

from __future__ import annotations

import hashlib
import re

#: Bytes kept as they are in a queue name (ASCII letters, digits and these punctuation marks).
KEPT = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:@,/")
#: The escape character of the readable form (itself escaped as `+2B`).
ESCAPE = "+"
#: Separates the readable start of a hashed name from its hash.
HASH_MARK = "#"
#: Hex digits of the key's SHA-256 in a hashed name (128 bits).
HASH_DIGITS = 32
#: The queue argument holding the raw key of a request queue.
KEY_ARGUMENT = "x-osrdyne-key"

_UNIT = r"(?:[A-Za-z0-9\-_.:@,/]|\+[0-9A-F]{2})"
_READABLE = re.compile(_UNIT + "+")
_HASHED = re.compile(_UNIT + "*#[0-9a-f]{" + str(HASH_DIGITS) + "}")
_ESCAPES = {byte: chr(byte) if byte in KEPT else f"{ESCAPE}{byte:02X}" for byte in range(256)}


def encode(key: str) -> str:
    """The readable form of `key` (not length-checked)."""
    return "".join(_ESCAPES[byte] for byte in key.encode())


def decode(encoded: str) -> str | None:
    """The key whose readable form is exactly `encoded`, or None when it is not one (another
    character, a malformed or needless escape, bytes that are not UTF-8)."""
    if not _READABLE.fullmatch(encoded):
        return None
    raw = bytearray()
    i = 0
    while i < len(encoded):
        if encoded[i] == ESCAPE:
            raw.append(int(encoded[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(encoded[i]))
            i += 1
    try:
        key = raw.decode()
    except UnicodeDecodeError:
        return None
    return key if encode(key) == encoded else None


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:HASH_DIGITS]


def name(prefix: str, key: str, *, limit: int) -> str | None:
    """`prefix` + the key's readable form, or its hashed form when that would pass `limit`
    bytes; None when even the hashed form cannot fit (the prefix is too long)."""
    readable = encode(key)  # ASCII: one byte a character
    used = len(prefix.encode())
    if used + len(readable) <= limit:
        return prefix + readable
    room = limit - used - len(HASH_MARK) - HASH_DIGITS
    if room < 0:
        return None
    start = readable[:room]
    # Do not end on a split escape: "+" or "+X".
    cut = start.rfind(ESCAPE, max(0, len(start) - 2))
    if cut != -1:
        start = start[:cut]
    return f"{prefix}{start}{HASH_MARK}{key_hash(key)}"


def is_hashed(suffix: str) -> bool:
    """True when `suffix` (a queue name without its prefix) has the shape of a hashed form."""
    return _HASHED.fullmatch(suffix) is not None
