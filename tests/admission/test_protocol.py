"""Both pools satisfy ``AdmissionPool``, member by member and signature by signature, so
that the Django side (``get_pool()``, the status page, metrics, lifespan) can hold either
without probing it."""

from __future__ import annotations

import inspect

import pytest

from django_pdfpool.admission import AdmissionPool, Pool, RedisPool

MEMBERS = [
    name
    for name, value in vars(AdmissionPool).items()
    if callable(value) and not name.startswith("_")
]


def pools():
    # Building a RedisPool connects to nothing; the URL is only parsed.
    return [Pool(), RedisPool(url="redis://127.0.0.1:1/0", namespace="protocol-test")]


@pytest.mark.parametrize("pool", pools(), ids=["Pool", "RedisPool"])
def test_each_pool_is_an_admission_pool(pool):
    assert isinstance(pool, AdmissionPool)
    assert (pool.slots, pool.queue_size, pool.wait) == (2, 4, 10.0)


@pytest.mark.parametrize("pool", pools(), ids=["Pool", "RedisPool"])
@pytest.mark.parametrize("name", MEMBERS)
def test_each_member_has_the_protocols_signature(pool, name):
    expected = inspect.signature(getattr(AdmissionPool, name))
    actual = inspect.signature(getattr(type(pool), name))
    assert list(actual.parameters) == list(expected.parameters), name
    assert inspect.iscoroutinefunction(getattr(type(pool), name)) == (
        inspect.iscoroutinefunction(getattr(AdmissionPool, name))
    ), name


def test_the_protocol_names_what_the_django_side_uses():
    assert {"run", "idle", "snapshot", "cluster_snapshot", "close", "drain", "stop"} <= set(MEMBERS)


def test_a_local_pool_has_no_cluster_and_is_idle_when_new():
    pool = Pool()
    assert pool.cluster_snapshot() is None and pool.idle()
