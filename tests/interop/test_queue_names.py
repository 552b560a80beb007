"""Request-queue names every AMQP client accepts: the encoding of docs/protocol.md, checked
against pamqp's own name check (the strictest client in use), reversible, collision-free, and
read back in both forms and in the raw form of osrdyne 0.1 (adoption after an upgrade)."""

from __future__ import annotations

import hashlib

import pamqp.commands
import pamqp.constants
import pytest
from hypothesis import given
from hypothesis import strategies as st

from osrdyne.wire import KEY_ARGUMENT, MAX_QUEUE_NAME_BYTES, PoolNames, key_problem

NAMES = PoolNames("core")
#: Keys as clients send them: any UTF-8 without control characters, up to 255 bytes.
KEYS = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=255).filter(
    lambda k: len(k.encode()) <= 255
)


def pamqp_accepts(queue: str) -> bool:
    """What pamqp (under aio-pika) checks before a queue name leaves the process."""
    try:
        pamqp.commands.Queue.Declare(queue=queue).validate()
    except ValueError:
        return False
    return pamqp.constants.DOMAIN_REGEX["queue-name"].fullmatch(queue) is not None


@pytest.mark.parametrize(
    ("key", "queue"),
    [
        ("infra=42", "core-req-infra+3D42"),
        ("k1", "core-req-k1"),
        ("dataset:trips/2024-01.v2", "core-req-dataset:trips/2024-01.v2"),
        ("gare de lyon é", "core-req-gare+20de+20lyon+20+C3+A9"),
        ("50%+1", "core-req-50+25+2B1"),
        ("a#b", "core-req-a+23b"),
    ],
)
def test_readable_keys_stay_readable(key: str, queue: str) -> None:
    assert NAMES.request_queue(key) == queue
    assert pamqp_accepts(queue)
    assert NAMES.key_of_queue(queue) == key
    assert NAMES.key_of_queue(queue, {KEY_ARGUMENT: key}) == key


def test_pamqp_refuses_the_raw_names_osrdyne_0_1_used() -> None:
    """Why the encoding exists: these keys' raw names never reach the broker from aio-pika."""
    for key in ("infra=42", "50%", "é"):
        assert not pamqp_accepts(f"core-req-{key}")


def test_a_long_key_gets_the_hashed_form_with_its_key_as_argument() -> None:
    key = "é" * 127  # 254 bytes, 762 characters once encoded
    assert key_problem(NAMES, key) is None
    queue = NAMES.request_queue(key)
    assert len(queue.encode()) == MAX_QUEUE_NAME_BYTES
    start = queue.removeprefix("core-req-").split("#")[0]
    assert start == "+C3+A9" * 35 + "+C3"  # 213 characters of whole escapes
    # Where an escape would be cut, the readable start stops before it.
    shifted = PoolNames("core1").request_queue(key)
    assert shifted.removeprefix("core1-req-").split("#")[0] == "+C3+A9" * 35
    assert queue.endswith("#" + hashlib.sha256(key.encode()).hexdigest()[:32])
    assert pamqp_accepts(queue)
    assert NAMES.request_queue_arguments(key) == {KEY_ARGUMENT: key}
    assert NAMES.key_of_queue(queue, {KEY_ARGUMENT: key}) == key
    assert NAMES.key_of_queue(queue) is None  # a hashed name cannot be read without it
    # An argument that does not name this queue is not believed.
    assert NAMES.key_of_queue(queue, {KEY_ARGUMENT: "other"}) is None


def test_names_of_osrdyne_0_1_are_read_back_as_their_raw_key() -> None:
    assert NAMES.key_of_queue("core-req-infra=42") == "infra=42"
    assert NAMES.key_of_queue("core-req-gare de lyon é") == "gare de lyon é"
    assert NAMES.key_of_queue("core-req-+41") == "+41"  # a needless escape: not our encoding
    assert NAMES.key_of_queue("core-req-") is None
    assert NAMES.key_of_queue("other-req-k") is None
    assert NAMES.key_of_queue("core-orphan") is None


def test_a_pool_too_long_for_any_name_is_a_key_problem() -> None:
    names = PoolNames("p" * 230)
    assert key_problem(names, "k") is None  # its readable name fits
    assert (
        key_problem(names, "k" * 30)
        == f"the pool name {names.pool!r} is too long for request queue names"
    )
    with pytest.raises(ValueError, match="too long"):
        names.request_queue("k" * 30)


@given(KEYS)
def test_every_key_has_one_portable_name_that_reads_back(key: str) -> None:
    queue = NAMES.request_queue(key)
    assert len(queue.encode()) <= MAX_QUEUE_NAME_BYTES
    assert pamqp_accepts(queue)
    assert NAMES.key_of_queue(queue, NAMES.request_queue_arguments(key)) == key
    if "#" not in queue:
        assert NAMES.key_of_queue(queue) == key


@given(KEYS, KEYS)
def test_different_keys_never_share_a_queue(a: str, b: str) -> None:
    if a != b:
        assert NAMES.request_queue(a) != NAMES.request_queue(b)


def test_osrdyne_leaves_pamqp_checks_to_other_code_of_the_process() -> None:
    """Importing osrdyne used to relax pamqp's queue-name check for every aio-pika user of
    the process. Now only code inside `any_queue_name()` (the controller, reaching queues
    osrdyne 0.1 named) sends such a name."""
    import osrdyne.wire

    assert not pamqp_accepts("core-req-infra=42")
    with osrdyne.wire.any_queue_name():
        assert pamqp_accepts("core-req-infra=42")
    assert not pamqp_accepts("core-req-infra=42")
