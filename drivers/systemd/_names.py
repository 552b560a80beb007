"""Instance names of a pool's units, as `systemd-escape` writes them.

The group of `key` in `pool` is the unit `<template prefix><instance>.service`. Instance names
follow `systemd-escape`'s rules, for people reading `systemctl list-units`:
the instance is `escape(pool) + "-" + escape(key)`, and since `escape` turns every `-` into
`\\x2d`, the first bare `-` ends the pool (`systemd-escape --unescape` gives `pool/key`). Two
things make some keys take a *hashed* form instead, `escape(pool)-<start of escape(key)>\\x2f
<32 hex digits of sha256(key)>` (`escape` turns `/` into `-`, never into `\\x2f`, so a hashed
name is never a readable one):

- the unit name would pass 190 characters (systemd takes 255, but PrivateTmp= and the like
  put the unit name inside longer file names);
- systemd opens a unit's `EnvironmentFile=` through `glob()`, where a backslash escapes the
  next character: `EnvironmentFile=/run/osrdyne/workers/%i.env` opens the instance *without
  its backslashes* (`core\\x2dx` -> `corex2dx.env`). That file name must tell instances apart,
  so an instance is used only when putting a backslash back before every `x` and two hex
  digits of the file name gives the instance again; a key whose escaped form holds a bare
  `x` and two hex digits (`0xff`) is hashed. A pool whose own escaped name fails that test
  (`box2d`) is refused: its files could be another pool's.

A group of several workers is several units of its key: the first (replica 0) is named as
above, each other one `<instance>\\x2f<replica>` (1 to `MAX_REPLICAS - 1`, no leading zero),
its instance computed within `REPLICA_ROOM` fewer characters so that every name stays within
`MAX_UNIT_NAME`. A readable instance never holds `\\x2f` and a hashed one has 32 hex digits
after its last, so the suffix is never part of a key's own name; each replica has its own
environment file (`%i`), glob-safe as the instance before it.
"""

from __future__ import annotations

import hashlib
import re

#: Longest unit name the driver makes. systemd accepts 255 characters, but then fails to
#: start the unit in its hardened forms: PrivateTmp= makes `/tmp/systemd-private-<boot id,
#: 32>-<unit>-XXXXXX`, one path component of at most 255 ("File name too long").
MAX_UNIT_NAME = 190
#: Hex digits of sha256(key) in a hashed instance name (128 bits).
HASH_DIGITS = 32
#: Marks a hashed instance name: the escape of '/', which systemd-escape never writes.
HASH_MARK = "\\x2f"

#: Most units of one group: a replica index has at most four digits.
MAX_REPLICAS = 10000
#: Characters a replica's suffix (`\\x2f` and its index) takes at most.
REPLICA_ROOM = len(HASH_MARK) + len(str(MAX_REPLICAS - 1))

#: What a unit name of ours may hold.
UNIT_NAME_CHARS = re.compile(r"^[A-Za-z0-9:_.\\-]+$")
_ESCAPE_TOKEN = re.compile(r"\\x[0-9a-f]{2}|.", re.DOTALL)
_GLOB_ESCAPED = re.compile(r"x[0-9a-f]{2}")
_REPLICA = re.compile(r"^(.+)\\x2f([1-9][0-9]{0,3})$")


def escape(text: str, *, leading: bool = True) -> str:
    """`text` escaped as `systemd-escape TEXT` does (its default, non-path mode).

    Every byte outside ASCII letters, digits and `:_.` becomes `\\xNN` (lowercase hex), `/`
    becomes `-`, and a leading `.` is escaped too (unless `leading` is False: `text` then
    stands after something else, as a key does after its pool).
    """
    out: list[str] = []
    for i, byte in enumerate(text.encode("utf-8", "surrogatepass")):
        char = chr(byte)
        if char == "/":
            out.append("-")
        elif (
            byte < 128
            and (char.isalnum() or char in ":_.")
            and not (leading and i == 0 and char == ".")
        ):
            out.append(char)
        else:
            out.append(f"\\x{byte:02x}")
    return "".join(out)


def unescape(escaped: str, *, leading: bool = True) -> str | None:
    """The text whose `escape` is exactly `escaped`, or None when it is not one (a hashed
    instance, a needless or malformed escape, bytes that are not UTF-8)."""
    raw = bytearray()
    for token in _ESCAPE_TOKEN.findall(escaped):
        if len(token) == 4:
            raw.append(int(token[2:], 16))
        elif token == "-":
            raw.append(ord("/"))
        elif token.isascii():
            raw.append(ord(token))
        else:
            return None
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return None
    return text if escape(text, leading=leading) == escaped else None


def file_stem(instance: str) -> str:
    """The name systemd's `glob()` opens for `%i` of `instance`: its backslashes dropped."""
    return instance.replace("\\", "")


def _glob_safe(escaped: str) -> bool:
    """Whether `file_stem` is reversible on `escaped`: putting a backslash back before every
    `x` and two hex digits of its stem gives it again. Names that pass this test have
    distinct stems, hence distinct environment files."""
    stem = file_stem(escaped)
    return _GLOB_ESCAPED.sub(lambda m: "\\" + m[0], stem) == escaped


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_DIGITS]


def instance_name(pool: str, key: str, *, limit: int) -> str:
    """The instance naming the group of `key` in `pool`, at most `limit` characters.

    Readable (`escape(pool)-escape(key)`) when that fits and is glob-safe, else hashed
    (`escape(pool)-<glob-safe start of escape(key)>\\x2f<sha256(key)[:32]>`). Raises
    ValueError when the pool leaves no room for a hashed name or is not glob-safe itself.
    """
    if "/" in pool or not pool:
        raise ValueError(f"pool name {pool!r} cannot name systemd units")
    head = escape(pool) + "-"
    if not _glob_safe(head):
        raise ValueError(
            f"pool name {pool!r} cannot name systemd units: its escaped form {head!r} holds "
            "an 'x' and two hex digits, which systemd's EnvironmentFile= glob would confuse "
            "with an escape"
        )
    tail = HASH_MARK + key_hash(key)
    room = limit - len(head) - len(tail)
    if room < 0:
        raise ValueError(f"pool name {pool!r} is too long for systemd unit names")
    readable = escape(f"{pool}/{key}")  # = head + escape(key, leading=False)
    if len(readable) <= limit and _glob_safe(readable):
        return readable
    start = ""
    for token in _ESCAPE_TOKEN.findall(escape(key, leading=False)):
        if len(start) + len(token) > room or not _glob_safe(head + start + token):
            break
        start += token
    return head + start + tail


def replica_instance(pool: str, key: str, replica: int, *, limit: int) -> str:
    """The instance naming replica `replica` of the group of `key`, at most `limit` characters:
    `instance_name` for replica 0, else `instance_name` within `REPLICA_ROOM` fewer
    characters followed by `\\x2f<replica>`."""
    if replica == 0:
        return instance_name(pool, key, limit=limit)
    if not 0 < replica < MAX_REPLICAS:
        raise ValueError(f"replica {replica} is not between 0 and {MAX_REPLICAS - 1}")
    return instance_name(pool, key, limit=limit - REPLICA_ROOM) + HASH_MARK + str(replica)


def replicas_glob(pool: str, key: str, *, limit: int) -> str:
    """A pattern (fnmatch, backslashes literal) every instance of replicas 1 and up of `key`
    matches; it may match other keys' instances too, which their names tell apart."""
    return instance_name(pool, key, limit=limit - REPLICA_ROOM) + HASH_MARK + "*"


def split_replica(instance: str) -> tuple[str, int]:
    """An instance as the instance of its group's replica 0 and its replica index."""
    match = _REPLICA.match(instance)
    if match is None:
        return instance, 0
    return match[1], int(match[2])
