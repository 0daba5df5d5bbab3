"""Issue 14's findings in the Django glue: one job, one name (2); nothing staged outlives
its request or its process (6); IPv6 callers by network (7)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import time

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ImproperlyConfigured
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import AsyncClient, Client, RequestFactory
from django.urls import path

from django_pdfpool import decorators, get_pool, pdf_pooled
from django_pdfpool.callers import user_or_forwarded_ip, user_or_ip
from tests import pdfs
from tests.conftest import held_requests, wait_until
from tests.views import HELD, _describe

JSON = {"HTTP_ACCEPT": "application/json"}


def upload(data: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile("doc.pdf", data, content_type="application/pdf")


def staged(pdfpool_settings: dict) -> list[str]:
    return os.listdir(pdfpool_settings["TEMP_DIR"])


# --- finding 2: one job, one name --------------------------------------------------


def page_job(pages: str):
    """A factory: every job it makes has the same ``__qualname__``."""

    async def job(upload):
        while pages == "first" and not HELD.release.is_set():
            await asyncio.sleep(0.005)
        return {"pages": pages, "sha256": upload.sha256}

    return job


def _named(pages: str):
    try:
        return pdf_pooled(job=page_job(pages), job_name=f"tests.{pages}_pages")(_describe)
    except TypeError:  # a decorator without job_name: the test below fails on it
        return pdf_pooled(job=page_job(pages))(_describe)


urlpatterns = [path("first/", _named("first")), path("all/", _named("all"))]


class _CallableJob:
    async def __call__(self, upload):
        return None

    async def method(self, upload):
        return None


async def _module_job(upload):
    return None


AMBIGUOUS = {
    "lambda": lambda upload: None,
    "closure": page_job("first"),
    "partial": functools.partial(_module_job),
    "callable object": _CallableJob(),
    "bound method": _CallableJob().method,
}


@pytest.mark.parametrize("kind", AMBIGUOUS)
def test_an_ambiguous_job_without_a_name_is_refused_when_the_view_is_decorated(kind):
    with pytest.raises(ImproperlyConfigured, match="job_name="):
        pdf_pooled(job=AMBIGUOUS[kind])(_describe)
    with pytest.raises(ImproperlyConfigured, match="job_name="):
        pdf_pooled(_describe, job=AMBIGUOUS[kind])


def test_a_module_function_needs_no_name_and_a_named_job_is_accepted():
    pdf_pooled(job=_module_job)(_describe)
    pdf_pooled(job=AMBIGUOUS["lambda"], job_name="tests.lambda")(_describe)
    with pytest.raises(ImproperlyConfigured):
        pdf_pooled(job=_module_job, job_name="two words")


@pytest.mark.urls("tests.test_security_glue")
def test_two_closures_of_one_factory_never_share_a_run(pdfpool):
    data = b"%PDF- one file to two jobs"
    with held_requests(2) as threads:
        first = threads.submit(
            Client(REMOTE_ADDR="10.1.0.1").post, "/first/", {"file": upload(data)}, **JSON
        )
        wait_until(lambda: get_pool().running() == 1)
        every = threads.submit(
            Client(REMOTE_ADDR="10.1.0.2").post, "/all/", {"file": upload(data)}, **JSON
        )
        every = every.result(timeout=10)  # its own job, not waiting for the held one
        HELD.release.set()
        first = first.result(timeout=30)
    assert first.json()["pdf"]["pages"] == "first"
    assert every.json()["pdf"]["pages"] == "all"  # not the first job's result


def test_the_default_jobs_key_holds_the_settings_that_change_its_result(pdfpool, monkeypatch):
    from django_pdfpool.admission.local import Pool

    keys = []
    run = Pool.run

    async def recording_run(self, key, *args, **kwargs):
        keys.append(key)
        return await run(self, key, *args, **kwargs)

    monkeypatch.setattr(Pool, "run", recording_run)
    data = pdfs.simple(["one", "two"])
    variants = [{}, {}, {"MAX_PAGES": 1}, {"ENGINE": "pypdfium2"}, {"MEMORY_LIMIT": 256 << 20}]
    variants += [{"MAX_TEXT_BYTES": 4096}, {"TIMEOUT": 20.0}]
    for extra in variants:
        if extra.get("ENGINE") == "pypdfium2" and not _importable("pypdfium2"):
            continue
        pdfpool(**extra)
        response = Client().post("/sync/", {"file": upload(data)}, **JSON)
        assert response.status_code == 200
    assert keys[0] == keys[1]  # the same settings: the same key
    assert len(set(keys)) == len(keys) - 1  # any result-changing setting: another key
    assert all(len(key) < 120 for key in keys)


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_the_settings_part_of_the_key_is_the_same_in_every_process(pdfpool):
    digest = "ab" * 32
    code = (
        "import django; django.setup(); from django_pdfpool.decorators import pool_key; "
        f"print(pool_key({digest!r}))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONHASHSEED": "7"}
    env["PDFPOOL_JSON"] = json.dumps({"MAX_PAGES": 3})
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert other.returncode == 0, other.stderr
    pdfpool(MAX_PAGES=3)
    assert other.stdout.strip() == decorators.pool_key(digest)
    assert decorators.pool_key(digest).endswith(":" + digest)


# --- finding 6: nothing staged outlives its request ------------------------------


def raising_caller(request):
    raise RuntimeError("the project's caller function failed")


async def araising_caller(request):
    raise RuntimeError("the project's async caller function failed")


@pytest.mark.parametrize("caller", [raising_caller, araising_caller])
def test_a_raising_caller_leaves_no_staged_copy_sync_view(pdfpool, caller):
    conf = pdfpool(CALLER=caller)
    with pytest.raises(RuntimeError, match="caller function failed") as raised:
        Client().post("/sync/", {"file": upload(b"%PDF- caller fails")}, **JSON)
    assert staged(conf) == []  # right away: no gc.collect(), the traceback still alive
    assert raised.value is not None


@pytest.mark.parametrize("caller", [raising_caller, araising_caller])
def test_a_raising_caller_leaves_no_staged_copy_async_view(pdfpool, caller):
    conf = pdfpool(CALLER=caller)
    client = AsyncClient()
    with pytest.raises(RuntimeError, match="caller function failed") as raised:
        asyncio.run(client.post("/async/", {"document": upload(b"%PDF- async caller fails")}))
    assert staged(conf) == []
    assert raised.value is not None


def test_a_pool_that_cannot_be_had_leaves_no_staged_copy(pdfpool, monkeypatch):
    conf = pdfpool()

    def no_pool():
        raise ImproperlyConfigured("no pool today")

    monkeypatch.setattr(decorators, "get_pool", no_pool)
    with pytest.raises(ImproperlyConfigured) as raised:
        Client().post("/sync/", {"file": upload(b"%PDF- no pool")}, **JSON)
    assert staged(conf) == [] and raised.value is not None


def test_a_staged_copy_is_named_with_its_process(pdfpool):
    conf = pdfpool()
    HELD.release.set()
    response = Client().post("/held/sync/", {"file": upload(b"%PDF- named")}, **JSON)
    assert response.status_code == 200
    assert os.path.basename(HELD.paths[0]).startswith(f"pdfpool-{os.getpid()}-")
    assert staged(conf) == []


def _dead_pid() -> int:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    return ended.pid


def test_start_up_sweeps_stale_copies_of_dead_processes_only(tmp_path):
    folder = tmp_path / "staged"
    folder.mkdir()
    dead = folder / f"pdfpool-{_dead_pid()}-abc123.pdf"
    alive = folder / f"pdfpool-{os.getpid()}-def456.pdf"  # this test's process: alive
    old = folder / "pdfpool-k2j4h5g6.pdf"  # no pid in the name (older versions): by age
    fresh = folder / "pdfpool-a1b2c3d4.pdf"
    other = folder / "notes.pdf"
    for file in (dead, alive, old, fresh, other):
        file.write_bytes(b"%PDF- staged")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    env["PDFPOOL_JSON"] = json.dumps({"TEMP_DIR": str(folder), "WAIT": 5, "TIMEOUT": 5})
    started = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in (alive, fresh, other))


# --- finding 7: IPv6 callers by network ------------------------------------------


def anonymous(remote: str, forwarded: str | None = None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded is not None else {}
    request = RequestFactory().post("/", REMOTE_ADDR=remote, **extra)
    request.user = AnonymousUser()
    return request


@pytest.mark.parametrize("caller", [user_or_ip, user_or_forwarded_ip])
def test_ipv6_callers_are_grouped_by_their_prefix(pdfpool, caller):
    def of(address: str) -> str:
        return caller(anonymous(address, address if caller is user_or_forwarded_ip else None))

    one_host = {of(f"2001:db8:1:2:{i:x}::{i:x}") for i in range(1, 50)}
    assert one_host == {"ip:2001:db8:1:2::/64"}
    assert of("2001:db8:1:3::1") != of("2001:db8:1:2::1")  # another /64, another caller
    assert of("2001:DB8:1:2:0:0:0:1") == of("2001:db8:1:2::1")  # one spelling
    pdfpool(IPV6_PREFIX=48)
    assert of("2001:db8:1:3::1") == of("2001:db8:1:2::1") == "ip:2001:db8:1::/48"
    pdfpool(IPV6_PREFIX=128)
    assert of("2001:db8:1:3::1") == "ip:2001:db8:1:3::1/128"


@pytest.mark.parametrize("caller", [user_or_ip, user_or_forwarded_ip])
def test_ipv4_mapped_addresses_are_their_ipv4_caller(pdfpool, caller):
    def of(address: str) -> str:
        return caller(anonymous(address, address if caller is user_or_forwarded_ip else None))

    assert of("::ffff:203.0.113.7") == of("203.0.113.7") == "ip:203.0.113.7"


@pytest.mark.parametrize("caller", [user_or_ip, user_or_forwarded_ip])
def test_an_address_that_does_not_parse_is_kept_as_it_is(pdfpool, caller):
    for odd in ("unknown", "not an address"):  # a port or brackets: tests/test_door.py
        request = anonymous(odd, odd if caller is user_or_forwarded_ip else None)
        assert caller(request) == f"ip:{odd}"


def test_forwarded_ipv6_behind_the_proxy_is_grouped_too(pdfpool):
    request = anonymous("10.0.0.1", "198.51.100.1, 2001:db8:7:7::9")
    assert user_or_forwarded_ip(request) == "ip:2001:db8:7:7::/64"
    assert user_or_ip(request) == "ip:10.0.0.1"
