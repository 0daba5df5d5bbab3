"""No Redis secret is ever shown: URLs in messages, checks, repr, snapshots, warnings and
the status JSON."""

from __future__ import annotations

import logging
import threading

import pytest

from django_pdfpool.admission import RedisPool
from django_pdfpool.admission.redis.urls import UNSHOWN, presentable
from django_pdfpool.conf import _redis_problems
from django_pdfpool.exceptions import CoordinatorUnavailable
from tests.conftest import held
from tests.support.redis_server import free_port
from tests.support.redis_terms import run

pytest_plugins = ["tests.support.redis_fixtures"]


pytestmark = pytest.mark.timeout(60)


SECRET = "s3cret"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@redis.internal:6379/0", "redis://:***@redis.internal:6379/0"),
        ("redis://app:s3cret@redis.internal/1", "redis://app:***@redis.internal/1"),
        ("redis://s3cret@redis.internal/0", "redis://***@redis.internal/0"),  # a lone name
        ("redis://h:6379/0?password=s3cret&db=2", "redis://h:6379/0?password=***&db=2"),
        ("redis://h/0?db=2&auth_token=s3cret", "redis://h/0?db=2&auth_token=***"),
        ("redis://h/0?PASSWORD=s3cret;x=1", "redis://h/0?PASSWORD=***;x=1"),
        ("redis://h/0?pass%77ord=s3cret", "redis://h/0?pass%77ord=***"),
        ("redis://:s3cret@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
        ("redis://[2001:db8::7]/0", "redis://[2001:db8::7]/0"),
        ("unix:///run/redis.sock?password=s3cret&db=0", "unix:///run/redis.sock?password=***&db=0"),
        ("unix://:s3cret@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        (
            "rediss://u:s3cret@h:6380/0?ssl_cert_reqs=none",
            "rediss://u:***@h:6380/0?ssl_cert_reqs=none",
        ),
        ("redis://h/s3cret", "redis://h/***"),  # not a database number
        ("redis://h/0#s3cret", "redis://h/0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),  # nothing to hide
    ],
)
def test_a_redis_url_is_shown_without_its_secrets(url, shown):
    assert presentable(url) == shown


@pytest.mark.parametrize(
    "garbage",
    [
        "s3cret",
        "redis:s3cret",
        "redis://:s3cret@h:port/0",
        "redis://:s3cret@[::1/0",
        "redis://h/0?password=s3cret\n",
        "redis://:1234/s3cret@h:6379/0",  # a password with a "/" (unescaped): "1234" shown
        "redis://default:4242#s3cret@h/0",
        "redis://:12?s3cret@h/0",
        None,
        42,
    ],
)
def test_what_does_not_parse_is_never_echoed(garbage):
    assert presentable(garbage) == UNSHOWN


def test_presentable_needs_no_redis_py():
    code = (
        "import sys; sys.modules['redis'] = None\n"
        "import django_pdfpool.admission.redis.urls as u, django_pdfpool.conf\n"
        "print(u.presentable('redis://:x@h/0'))"
    )
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "redis://:***@h/0"


@pytest.mark.parametrize(
    "url",
    [
        "redis://:s3cret@h:notaport/0",
        "http://:s3cret@h/0",
        "redis://h/0?password=s3cret&db=x",
        "s3cret",
    ],
)
def test_check_e007_repeats_no_password(url):
    (problem,) = _redis_problems("PDFPOOL['REDIS']", {"URL": url})
    assert problem.id == "django_pdfpool.E007"
    assert SECRET not in problem.msg


def test_repr_and_snapshot_hold_no_secret_and_keep_ipv6_brackets():
    pool = RedisPool(url=f"redis://:{SECRET}@[::1]:1/0?password={SECRET}", namespace="n")
    assert SECRET not in repr(pool) and "[::1]:1" in repr(pool)


def test_the_warning_when_redis_fails_and_the_status_json_hold_no_secret(caplog):
    caplog.set_level(logging.INFO, logger="django_pdfpool.redis")
    url = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0?password={SECRET}"
    pool = RedisPool(url=url, namespace="n", timeout=0.5)

    async def scenario():
        with pytest.raises(CoordinatorUnavailable):
            await pool.run("k", "c", held("A", threading.Event()))
        snap = pool.cluster_snapshot()
        await pool.stop()
        return snap

    snap = run(scenario)
    assert pool.mode == "refusing" and "failed" in caplog.text
    assert SECRET not in caplog.text
    assert SECRET not in repr(snap) and snap.url.endswith("?password=***")
