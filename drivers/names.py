"""Safe names for the things drivers create, derived from arbitrary worker keys.

A worker key is any UTF-8 string of up to 255 bytes; container and Kubernetes object names
are DNS-1123 labels (lowercase alphanumerics and '-', at most 63 characters, starting and
ending with an alphanumeric) and Kubernetes label values are at most 63 characters of
`[A-Za-z0-9._-]`. So a key never *becomes* a name by escaping: the name is a readable,
sanitized prefix (for people running `docker ps` or `kubectl get`) followed by a hash of the
exact (pool, key) pair, which alone makes names of distinct keys distinct. The original key
travels beside the object, as a label (Docker, whose labels hold any string), an annotation
(Kubernetes) and the `WORKER_KEY` environment variable.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

#: Longest DNS-1123 label, and longest Kubernetes label value.
MAX_LABEL = 63
#: Characters of the name hash: 20 base32 characters are 100 bits of sha256, so a collision
#: between two keys of a pool is not a practical concern (birthday bound ~2**50 keys).
NAME_HASH_CHARS = 20
#: Characters of a version hash (short: it only has to tell configurations apart).
VERSION_HASH_CHARS = 10

_NOT_NAME_CHAR = re.compile(r"[^a-z0-9]+")
_NOT_LABEL_CHAR = re.compile(r"[^A-Za-z0-9._-]+")
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _digest(data: bytes, chars: int) -> str:
    """Lowercase base32 (alphabet a-z, 2-7) of the sha256 of `data`, cut to `chars`."""
    encoded = base64.b32encode(hashlib.sha256(data).digest()).decode("ascii").rstrip("=")
    return encoded.lower()[:chars]


def _pair(pool: str, key: str) -> bytes:
    # A JSON array encodes the pair injectively, whatever characters pool and key hold
    # (ensure_ascii escapes everything, lone surrogates included).
    return json.dumps([pool, key], ensure_ascii=True).encode("ascii")


def is_dns_label(name: str) -> bool:
    """Whether `name` is a valid DNS-1123 label."""
    return len(name) <= MAX_LABEL and bool(_DNS_LABEL.match(name))


def is_label_value(value: str) -> bool:
    """Whether `value` is a valid Kubernetes label value."""
    return len(value) <= MAX_LABEL and bool(_LABEL_VALUE.match(value))


def object_name(pool: str, key: str, *, suffix: str = "") -> str:
    """The DNS-1123 label naming the worker group of `key` in `pool` (plus `suffix`).

    Stable across processes and versions of osrdyne, and distinct for distinct (pool, key)
    pairs: `<readable prefix>-<hash of the exact pool and key>[-<suffix>]`. `suffix` (e.g. a
    worker index) must itself be made of lowercase alphanumerics and '-'.
    """
    if suffix and not is_dns_label(suffix):
        raise ValueError(f"suffix {suffix!r} is not a DNS-1123 label")
    digest = _digest(_pair(pool, key), NAME_HASH_CHARS)
    tail = f"{digest}-{suffix}" if suffix else digest
    room = MAX_LABEL - len(tail) - 1  # '-' between prefix and tail
    if room < 0:
        raise ValueError(f"suffix {suffix!r} leaves no room for the name hash")
    prefix = _NOT_NAME_CHAR.sub("-", f"{pool}-{key}".lower())[:room].strip("-")
    return f"{prefix}-{tail}" if prefix else tail


def key_hash(pool: str, key: str) -> str:
    """A label value identifying the exact (pool, key) pair: full sha256, 52 characters."""
    return _digest(_pair(pool, key), 52)


def label_value(text: str) -> str:
    """A Kubernetes label value standing for `text`.

    `text` itself when it already is a valid label value (pool names usually are), otherwise a
    sanitized prefix and a hash of the exact text, so that distinct texts stay distinct.
    """
    if is_label_value(text):
        return text
    digest = _digest(text.encode("utf-8", "surrogatepass"), NAME_HASH_CHARS)
    room = MAX_LABEL - len(digest) - 1
    prefix = _NOT_LABEL_CHAR.sub("-", text)[:room]
    prefix = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", prefix)
    return f"{prefix}-{digest}" if prefix else digest


def version_hash(spec: Any) -> str:
    """A short label-safe hash of a JSON-able configuration: the version of a group."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return _digest(canonical.encode("ascii"), VERSION_HASH_CHARS)
