"""Dataset versions: written aside, made visible in one step, never changed afterwards.

Layout of a dataset root:

    ROOT/flights@20261126T221000Z/     a version: Parquet files, _manifest.json, _quarantine/
    ROOT/flights@v2/                   another (a version named with --version)
    ROOT/flights -> flights@v2         the current version: a symbolic link
    ROOT/.staging-flights@v3-1a2b3c4d/ a version being written: no key can name it

A version is written under `.staging-...` (a name the key grammar refuses: no worker can
read it), checked, given its manifest, then renamed to `NAME@VERSION` (one `rename(2)`,
atomic on one filesystem): a version directory that exists is complete. A name that exists
is never written again, so a worker holding a version (its plan cache, its cached rows)
never sees it change. Then the link `NAME` is moved to it, by renaming a new link over the
old one (atomic as well). A publish killed at any point leaves either the previous state or
the new version complete; at worst a `.staging-...` directory, which `pipeline ingest`
removes when it next runs for the name.

How a new version reaches workers: the key `NAME@VERSION` always reads that version; the key
`NAME` reads the version the link named when its worker loaded, and keeps serving it (its
`schema` answer says which) until the group is stopped (idle) and started again, when it
reads the new one. So clients that must see a new version at once call `NAME@VERSION`
(printed by the ingest): a new worker group loads it while the old group keeps answering
for the old version. Old versions are kept; delete them when no key names them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator

from spark_workers.pipeline_errors import VersionError

STAGING_PREFIX = ".staging-"


def new_version() -> str:
    """A version name from the time (UTC), valid in keys."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")


def staging(root: str, dataset: str) -> str:
    """A fresh directory to write `dataset` into (removes what earlier killed runs left)."""
    os.makedirs(root, exist_ok=True)
    for leftover in os.listdir(root):
        if leftover.startswith(f"{STAGING_PREFIX}{dataset}-"):
            shutil.rmtree(os.path.join(root, leftover), ignore_errors=True)
    return os.path.join(root, f"{STAGING_PREFIX}{dataset}-{uuid.uuid4().hex[:8]}")


def check_free(root: str, name: str, dataset: str, *, promote: bool) -> None:
    """Refuse before any work: the version exists, or `name` is not ours to move."""
    if os.path.lexists(os.path.join(root, dataset)):
        raise VersionError(f"version {dataset!r} exists under {root}: versions are never rewritten")
    pointer = os.path.join(root, name)
    if promote and os.path.lexists(pointer) and not os.path.islink(pointer):
        raise VersionError(
            f"{pointer} is a directory or file, not the link to the current version "
            "(written by an older ingest?): move it away, or ingest with --no-promote"
        )


def publish(
    root: str,
    staged: str,
    name: str,
    dataset: str,
    *,
    promote: bool,
    expected: str | None = None,
) -> str:
    """Make `staged` the version `dataset` (one rename), then point `name` at it.

    `expected`: the version `name` must still point at (an append's base); when another
    publish moved it meanwhile, nothing is published (the append would lose its rows).
    Publishes of one name take turns (a lock file beside the versions)."""
    target = os.path.join(root, dataset)
    with _turn(root, name):
        if expected is not None and current(root, name) != expected:
            raise VersionError(
                f"{name!r} moved from {expected!r} to {current(root, name)!r} meanwhile: "
                "nothing published, append again"
            )
        if os.path.lexists(target):
            raise VersionError(f"version {dataset!r} appeared meanwhile: not overwritten")
        os.rename(staged, target)
        if promote:
            link = os.path.join(root, f"{STAGING_PREFIX}{name}-link-{uuid.uuid4().hex[:8]}")
            os.symlink(dataset, link)
            os.replace(link, os.path.join(root, name))
    return target


@contextlib.contextmanager
def _turn(root: str, name: str) -> Iterator[None]:
    """An exclusive lock on `name`'s publishes (`flock`: released if the process dies)."""
    path = os.path.join(root, f"{STAGING_PREFIX}{name}.lock")
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def current(root: str, name: str) -> str | None:
    """The dataset (`name@version`) the link `name` points at, or None."""
    pointer = os.path.join(root, name)
    if not os.path.islink(pointer):
        return None
    return os.path.basename(os.readlink(pointer))


def discard(staged: str) -> None:
    shutil.rmtree(staged, ignore_errors=True)
