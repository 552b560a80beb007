"""Properties of the key -> name mapping, over arbitrary Unicode keys (hypothesis)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from drivers import names

pytestmark = pytest.mark.timeout(60)

DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")

keys = st.text(min_size=1, max_size=255)
pools = st.one_of(st.sampled_from(["core", "editoast", "p", "x" * 60]), st.text(max_size=80))
suffixes = st.one_of(
    st.just(""), st.integers(0, 999).map(str), st.from_regex(r"[0-9]-[a-z2-7]{10}", fullmatch=True)
)


@given(pool=pools, key=keys, suffix=suffixes)
def test_object_name_is_a_dns_label(pool: str, key: str, suffix: str) -> None:
    name = names.object_name(pool, key, suffix=suffix)
    assert DNS_LABEL.match(name), name
    assert names.is_dns_label(name)
    if suffix:
        assert name.endswith(f"-{suffix}")


@given(pool=pools, key=keys)
def test_object_name_is_stable(pool: str, key: str) -> None:
    assert names.object_name(pool, key) == names.object_name(pool, key)


def test_object_name_is_stable_across_releases() -> None:
    # Pinned: a change here renames every running group (they would be adopted no more).
    assert names.object_name("core", "infra/42") == "core-infra-42-kxb2bbm7xpmb6f2n7opm"


@settings(max_examples=500)
@given(pool=pools, a=keys, b=keys)
def test_distinct_keys_get_distinct_names(pool: str, a: str, b: str) -> None:
    if a != b:
        assert names.object_name(pool, a) != names.object_name(pool, b)
        assert names.key_hash(pool, a) != names.key_hash(pool, b)


@given(a=pools, b=pools, key=keys)
def test_distinct_pools_get_distinct_names(a: str, b: str, key: str) -> None:
    if a != b:
        assert names.object_name(a, key) != names.object_name(b, key)


def test_keys_that_sanitize_alike_stay_apart() -> None:
    similar = ["Infra 1", "infra-1", "infra_1", "INFRA/1", "infra\u00e91", "infra 1 ", ""]
    assert len({names.object_name("core", k) for k in similar}) == len(similar)


def test_readable_prefix() -> None:
    assert names.object_name("core", "Infra_12").startswith("core-infra-12-")


@given(text=st.text(max_size=300))
def test_label_value_is_valid(text: str) -> None:
    value = names.label_value(text)
    assert LABEL_VALUE.match(value), value
    assert names.is_label_value(value)


@given(a=st.text(max_size=100), b=st.text(max_size=100))
def test_label_value_keeps_texts_apart(a: str, b: str) -> None:
    if a != b:
        assert names.label_value(a) != names.label_value(b)


def test_label_value_keeps_valid_values() -> None:
    assert names.label_value("core") == "core"
    assert names.label_value("my.pool_1") == "my.pool_1"
    assert names.label_value("bad value!") != "bad value!"


@given(pool=pools, key=keys)
def test_key_hash_is_a_label_value(pool: str, key: str) -> None:
    assert names.is_label_value(names.key_hash(pool, key))


@given(spec=st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=5))))
def test_version_hash_ignores_order_and_is_label_safe(spec: dict[str, object]) -> None:
    reordered = dict(reversed(list(spec.items())))
    assert names.version_hash(spec) == names.version_hash(reordered)
    assert names.is_label_value(names.version_hash(spec))


def test_bad_suffix_is_refused() -> None:
    with pytest.raises(ValueError):
        names.object_name("core", "k", suffix="Not OK")
