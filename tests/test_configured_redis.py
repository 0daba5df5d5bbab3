"""The Redis backend from Django: settings and checks, get_pool() building a RedisPool,
and @pdf_pooled extracting through it (the Extraction crossing Redis as JSON)."""

from __future__ import annotations

import asyncio
import io
import threading

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client, override_settings

from django_pdfpool import bounds, get_pool
from django_pdfpool.checks import check_settings
from django_pdfpool.conf import get_settings
from django_pdfpool.configured import _build
from django_pdfpool.sandbox.extract import Extraction
from tests.conftest import until, wait_until
from tests.support import pdfs
from tests.test_decorators import JSON, upload

pytest_plugins = ["tests.support.redis_fixtures"]


@pytest.mark.parametrize(
    ("value", "check_id"),
    [
        ({"REDIS": "memcached"}, "django_pdfpool.E003"),
        ({"REDIS": {}}, "django_pdfpool.E007"),
        ({"REDIS": {"URL": "http://localhost"}}, "django_pdfpool.E007"),
        ({"REDIS": {"URL": "redis://h/0", "NAMESPACE": "a{b}"}}, "django_pdfpool.E003"),
        ({"REDIS": {"URL": "redis://h/0", "LEASE": 0}}, "django_pdfpool.E003"),
        ({"REDIS": {"URL": "redis://h/0", "FALLBACK": "ignore"}}, "django_pdfpool.E003"),
    ],
)
def test_bad_redis_settings_fire_checks(settings, value, check_id):
    settings.PDFPOOL = value
    assert check_id in [error.id for error in check_settings()]
    with pytest.raises(ImproperlyConfigured, match=check_id):
        get_settings()


def test_the_redis_backend_serves_the_decorator(pdfpool, redis_server, namespace):
    from django_pdfpool.admission import RedisPool

    pdfpool(REDIS={"URL": redis_server.url, "NAMESPACE": namespace, "LEASE": 2.0})
    assert check_settings() == []
    pool = get_pool()
    assert isinstance(pool, RedisPool) and pool.mode == "redis"
    data = pdfs.simple(["through redis"], title="Clustered")
    response = Client().post("/sync/", {"file": upload(data)}, **JSON)
    assert response.status_code == 200, response.content
    pdf = response.json()["pdf"]
    assert "through redis" in pdf["text"] and pdf["page_count"] == 1
    assert pool.snapshot().counters.completed == 1


def test_every_term_at_its_largest_serves_an_upload_and_the_status(
    pdfpool, redis_server, namespace
):
    """The child's alarm and setrlimit, the door's waits, Redis's milliseconds and Lua's
    numbers, socket timeouts and the status tables all take the largest values the checks
    pass."""
    longest, largest = bounds.LONGEST, bounds.LARGEST
    pdfpool(
        **dict.fromkeys(["SLOTS", "QUEUE", "MEMORY_LIMIT", "MAX_UPLOAD_SIZE"], largest),
        **dict.fromkeys(["MAX_PAGES", "MAX_TEXT_BYTES"], largest),
        TIMEOUT=longest,
        WAIT=longest,
        DOOR={"BODY_TIMEOUT": longest, "BODY_TIMEOUT_MAX": longest, "BUDGET": largest},
        REDIS={
            "URL": redis_server.url,
            "NAMESPACE": namespace,
            "LEASE": longest,
            "TIMEOUT": longest,
        },
    )
    assert check_settings() == []
    data = pdfs.simple(["a long time"])
    response = Client().post("/sync/", {"file": upload(data)}, **JSON)
    assert response.status_code == 200, response.content
    assert "a long time" in response.json()["pdf"]["text"]
    for options in ([], ["--json"]):
        out = io.StringIO()
        call_command("pdfpool", "status", *options, stdout=out)
        assert namespace in out.getvalue()


def test_a_settings_change_retires_the_pool_it_replaces(pdfpool, redis_server, namespace):
    """The idle pool replaced is drained: left beating, it kept this process registered with
    the old SLOTS, and every job of its successor was refused 503 ``misconfigured``."""
    terms = {"URL": redis_server.url, "NAMESPACE": namespace}
    pdfpool(SLOTS=2, REDIS=terms)
    for slots, text in ((2, "before"), (3, "after")):
        with override_settings(PDFPOOL={"SLOTS": slots, "REDIS": terms}):
            response = Client().post("/sync/", {"file": upload(pdfs.simple([text]))}, **JSON)
            assert response.status_code == 200, response.content
            assert response.json()["pdf"]["text"] == text
            if slots == 2:
                replaced = get_pool()
    assert replaced.snapshot().closed and get_pool() is not replaced


def test_a_replaced_pool_that_cannot_reach_redis_still_ends(pdfpool, own_redis, namespace):
    """Redis gone when a settings change replaces the pool: the pool still ends (its beat
    and probe stop, its connections close); its lease in Redis lapses."""
    terms = {"URL": own_redis.url, "NAMESPACE": namespace}
    pdfpool(SLOTS=2, REDIS=terms)
    response = Client().post("/sync/", {"file": upload(pdfs.simple(["before"]))}, **JSON)
    assert response.status_code == 200, response.content
    replaced = get_pool()
    own_redis.kill()
    with override_settings(PDFPOOL={"SLOTS": 3, "REDIS": terms}):
        assert get_pool() is not replaced
    side = replaced._side
    assert side.retired  # its tasks, cancelled, end on the job loop's next turns
    wait_until(lambda: all(task.done() for task in list(side._tasks)))


def test_sentinels_are_a_setting(pdfpool, redis_server, namespace):
    """SENTINELS: "host:port" strings; URL's host is then the service name."""
    pdfpool(REDIS={"SENTINELS": "127.0.0.1:26379"})  # not a list
    assert "django_pdfpool.E003" in [error.id for error in check_settings()]
    pdfpool(REDIS={"SENTINELS": ["no-port"]})
    assert "django_pdfpool.E003" in [error.id for error in check_settings()]
    pdfpool(
        REDIS={
            "URL": "redis://primary/0",
            "NAMESPACE": namespace,
            "SENTINELS": ["127.0.0.1:26379", "[::1]:26380"],
        }
    )
    assert check_settings() == []
    assert get_settings().redis.sentinels == (("127.0.0.1", 26379), ("::1", 26380))


def test_an_extraction_max_text_bytes_allows_reaches_sharers_in_other_processes(
    pdfpool, redis_server, namespace
):
    """Its text at MAX_TEXT_BYTES (past the Redis pool's 16 MiB default) and its metadata at
    its caps, every character escaped in JSON: the sharer gets it, not ResultTooLarge."""
    pdfpool(MAX_TEXT_BYTES=20 << 20, REDIS={"URL": redis_server.url, "NAMESPACE": namespace})
    here, there = _build(get_settings()), _build(get_settings())  # two processes' pools
    pages = ("a" * ((20 << 20) - 3),)  # its JSON, quotes and comma, at MAX_TEXT_BYTES
    metadata = {f"{i:02}" + "\x01" * 1998: "\x01" * 2000 for i in range(64)}  # 6 bytes each
    gate = threading.Event()

    async def job() -> Extraction:
        await until(gate.is_set, 30)
        return Extraction("0" * 64, 1, pages, metadata, True, 0.1, 1, text_truncated=True)

    got: dict[str, object] = {}

    def call(name: str, pool) -> None:
        try:
            got[name] = asyncio.run(pool.run("extract:tag:abc", name, job))
        except Exception as error:  # shown by the assertion
            got[name] = error

    try:
        starter = threading.Thread(target=call, args=("starter", here))
        starter.start()
        wait_until(lambda: here.running() == 1)
        sharer = threading.Thread(target=call, args=("sharer", there))
        sharer.start()
        wait_until(lambda: there.waiting("extract:tag:abc") == 1)
        gate.set()
        starter.join(60)
        sharer.join(60)
        assert isinstance(got["sharer"], Extraction), got["sharer"]
        assert got["sharer"] == got["starter"]
        assert got["sharer"].pages == pages and dict(got["sharer"].metadata) == metadata
    finally:
        gate.set()
        for pool in (here, there):
            asyncio.run(pool.stop())


def test_an_extraction_of_control_characters_fits_the_results_limit(
    pdfpool, redis_server, namespace
):
    """JSON writes a control character in 6 bytes: an extraction whose text is MAX_TEXT_BYTES
    of them still fits what the Redis pool lets cross processes."""
    from django_pdfpool.admission.redis.codec import decode_outcome, encode_outcome
    from django_pdfpool.configured import _encode_result

    pdfpool(MAX_TEXT_BYTES=4 << 20, REDIS={"URL": redis_server.url, "NAMESPACE": namespace})
    limit = _build(get_settings())._settings.max_result_bytes
    pages = ("\x01" * (4 << 20),)
    extraction = Extraction("0" * 64, 1, pages, {}, False, 0.1, 1)
    _, error = decode_outcome(encode_outcome(extraction, None, encode=_encode_result, limit=limit))
    assert error is None, error
