"""The settings table (``conf.PoolSettings``'s fields): each PDFPOOL key declared once, and
everything else made from it: ``DEFAULTS``, the typed ``PoolSettings``, ``problems()`` (the
checks and ``get_settings()``), and docs/settings.md. A key added to the table is in all of
them; a bound a lower layer owns is the same object in the table and refuses the same values
there as an argument."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib.util
import math
import re
import threading
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_pdfpool import bounds, conf
from django_pdfpool.admission.local import Pool
from django_pdfpool.bounds import integer
from django_pdfpool.conf import (
    DEFAULTS,
    MOVED,
    SETTINGS,
    PoolSettings,
    get_settings,
    problems,
    setting,
    table_of,
)
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox.confine import REQUIRE
from django_pdfpool.sandbox.wire import ENGINE
from tests.support import pdfs

NESTED = {key: table_of(declared.group) for key, declared in SETTINGS.items() if declared.group}
EVERY = {(key,): declared for key, declared in SETTINGS.items() if not declared.group} | {
    (outer, key): declared for outer, table in NESTED.items() for key, declared in table.items()
}
"""Every key that holds a value, top-level or nested: ("SLOTS",), ("DOOR", "BUDGET")..."""


def raw(path: tuple[str, ...], value: object) -> dict:
    """A PDFPOOL setting ``path`` to ``value`` (a nested key inside its dict)."""
    return {path[0]: value} if len(path) == 1 else {path[0]: {path[1]: value}}


def named(path: tuple[str, ...]) -> str:
    return "PDFPOOL" + "".join(f"[{key!r}]" for key in path)


ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "settings.md"


class _NotASetting:
    """A value every check refuses (not a number, a string, a bool or None), with a stable id."""

    def __repr__(self) -> str:
        return "NOT_A_SETTING"


NOT_A_SETTING = _NotASetting()


def test_every_key_of_the_table_is_a_typed_field_a_default_and_a_check():
    names = [f.name for f in dataclasses.fields(PoolSettings) if "setting" in f.metadata]
    assert list(SETTINGS) == [name.upper() for name in names]
    assert list(DEFAULTS) == list(SETTINGS)
    hints = PoolSettings.__annotations__
    for key, declared in SETTINGS.items():
        assert hints[key.lower()], key  # a typed attribute
        assert DEFAULTS[key] is declared.default
        assert declared.check(declared.default), f"{key}'s default fails its own check"
        assert declared.help and "|" not in declared.help and "\n" not in declared.help, key


def test_the_defaults_build_the_settings(settings):
    settings.PDFPOOL = {}
    built = get_settings()
    for key, declared in SETTINGS.items():
        if not declared.group:  # a dict's own test is below
            assert getattr(built, key.lower()) == declared.convert(declared.default), key
    assert (built.wait, built.timeout, built.redis) == (10.0, 30.0, None)
    assert built.door is not None and built.door.budget == 256 and built.sandbox.layers is True
    assert callable(built.caller) and callable(built.refusal_view)


@pytest.mark.parametrize("path", list(EVERY), ids="/".join)
def test_a_bad_value_of_every_key_is_e003_naming_what_it_must_be(settings, path):
    """Nested keys too: each checked with its own bound, named with its dict."""
    expected = EVERY[path].check.expected
    found = problems(raw(path, NOT_A_SETTING))
    assert found[0].id == "django_pdfpool.E003"
    assert found[0].msg == f"{named(path)} must be {expected}, not {NOT_A_SETTING!r}."
    settings.PDFPOOL = raw(path, NOT_A_SETTING)
    with pytest.raises(
        ImproperlyConfigured, match=re.escape(f"[django_pdfpool.E003] {named(path)}")
    ):
        get_settings()


@pytest.mark.parametrize("key", list(NESTED))
def test_a_nested_dicts_unknown_key_is_e002_naming_the_keys_it_knows(key):
    (problem,) = [p for p in problems({key: {"NOPE": 1}}) if p.id == "django_pdfpool.E002"]
    assert problem.msg == f"PDFPOOL[{key!r}] has an unknown key 'NOPE'."
    assert problem.hint == "Known keys: " + ", ".join(NESTED[key]) + "."


@pytest.mark.parametrize(
    "raw, where, meant",
    [
        ({"REDIS": {"url": "redis://cache/0"}}, "PDFPOOL['REDIS']", "PDFPOOL['REDIS']['URL']"),
        ({"slots": 4}, "PDFPOOL", "PDFPOOL['SLOTS']"),
        ({"URL": "redis://cache/0"}, "PDFPOOL", "PDFPOOL['REDIS']['URL']"),
        ({"REQUIRE": "full"}, "PDFPOOL", "PDFPOOL['SANDBOX']['REQUIRE']"),
        ({"REDIS": {"URL": "redis://cache/0", "SLOTS": 4}}, "PDFPOOL['REDIS']", "PDFPOOL['SLOTS']"),
    ],
    ids=["url", "slots", "url-outside", "require-outside", "slots-inside"],
)
def test_an_unknown_key_that_is_a_known_one_misspelt_or_misplaced_says_which(raw, where, meant):
    """The hint listed the dict's keys, leaving the operator to find that "url" is "URL" or
    that URL goes in REDIS; it now names the key meant, where it goes."""
    (unknown,) = [p for p in problems(raw) if p.id == "django_pdfpool.E002"]
    assert unknown.msg.startswith(f"{where} has an unknown key ")
    assert unknown.hint == f"Did you mean {meant}?"


def test_nested_values_are_merged_over_their_defaults_and_bounded(settings):
    settings.PDFPOOL = {"DOOR": {"BUDGET": 3}, "SANDBOX": {"CHILD_ENV": ["A"]}}
    built = get_settings()
    assert built.door is not None and (built.door.budget, built.door.body_timeout) == (3, 20.0)
    assert built.sandbox.child_env == ("A",) and built.sandbox.require == "none"
    (bad,) = problems({"DOOR": {"BODY_TIMEOUT": 0}})
    assert bad.msg == "PDFPOOL['DOOR']['BODY_TIMEOUT'] must be seconds > 0 and <= 1e9, not 0."


def test_door_false_turns_the_door_off_and_true_is_the_defaults(settings):
    settings.PDFPOOL = {"DOOR": False}
    assert get_settings().door is None
    settings.PDFPOOL = {"DOOR": True}
    assert get_settings().door == get_settings().door.defaults()  # type: ignore[union-attr]
    assert [p.id for p in problems({"DOOR": None})] == ["django_pdfpool.E003"]


def test_redis_set_is_the_redis_pool_none_is_each_processs_own(settings):
    settings.PDFPOOL = {"REDIS": {"URL": "redis://h/0", "LEASE": 2}}
    built = get_settings().redis
    assert built is not None and (built.url, built.lease, built.namespace) == (
        "redis://h/0",
        2.0,
        "pdfpool",
    )
    settings.PDFPOOL = {}
    assert get_settings().redis is None


@pytest.mark.parametrize("key", list(MOVED))
def test_a_moved_key_is_e008_naming_its_new_home(settings, key):
    (problem,) = problems({key: 1})
    assert problem.id == "django_pdfpool.E008"
    assert problem.msg == f"PDFPOOL[{key!r}] moved: use {MOVED[key]}."
    settings.PDFPOOL = {key: 1}
    with pytest.raises(
        ImproperlyConfigured, match=re.escape(f"[django_pdfpool.E008] PDFPOOL[{key!r}] moved")
    ):
        get_settings()


def test_the_moved_keys_name_homes_that_exist():
    assert set(MOVED).isdisjoint(SETTINGS)
    assert MOVED["DOOR_BUDGET"] == "PDFPOOL['DOOR']['BUDGET']"
    for home in MOVED.values():
        for outer, inner in re.findall(r"PDFPOOL\['(\w+)'\]\['(\w+)'\]", home):
            assert inner in NESTED[outer], home
    assert len(SETTINGS) <= 15


def test_the_messages_stay_as_they_were():
    """The words of the checks users already know (tests/e2e/test_example.py reads two of them)."""
    found = {p.msg for p in problems({"SLOTS": 0, "WAIT": "soon", "MEMORY_LIMIT": 1024})}
    assert found == {
        "PDFPOOL['SLOTS'] must be an integer >= 1 and <= 2**53, not 0.",
        "PDFPOOL['WAIT'] must be seconds >= 0 and <= 1e9, or None, not 'soon'.",
        "PDFPOOL['MEMORY_LIMIT'] must be bytes, an integer >= 128 MiB and <= 2**53, not 1024.",
    }
    (unknown,) = problems({"SLOTZ": 2})
    assert unknown.id == "django_pdfpool.E002"
    assert unknown.msg == "PDFPOOL has an unknown key 'SLOTZ'."
    assert unknown.hint == "Known keys: " + ", ".join(SETTINGS) + "."
    assert [p.id for p in problems(["SLOTS"])] == ["django_pdfpool.E001"]


def test_the_table_checks_what_the_bounds_alone_cannot_see():
    """E004 (a dotted path that does not import) and E007 (the Redis backend without a
    URL) come from the table's entries too, and only once their value passed its check."""
    (caller,) = problems({"REFUSAL_VIEW": "no.such.module.view"})
    assert caller.id == "django_pdfpool.E004" and "'REFUSAL_VIEW'" in caller.msg
    assert "the request and the exception" in caller.hint
    assert [p.id for p in problems({"REDIS": {}})] == ["django_pdfpool.E007"]
    assert problems({"REDIS": {"URL": "redis://127.0.0.1:1/0"}}) == []
    assert [p.id for p in problems({"CALLER": 42})] == ["django_pdfpool.E003"]


@pytest.mark.parametrize("key", ["CALLER", "REFUSAL_VIEW"])
def test_a_dotted_path_to_what_cannot_be_called_is_e004(settings, key):
    """It imports, but every upload (or refusal) would fail on calling it."""
    (found,) = problems({key: "django_pdfpool.bounds.MiB"})
    assert found.id == "django_pdfpool.E004"
    assert found.msg == f"PDFPOOL[{key!r}] = 'django_pdfpool.bounds.MiB' is not callable (int)."
    settings.PDFPOOL = {key: "django_pdfpool.bounds.MiB"}
    with pytest.raises(ImproperlyConfigured, match=r"\[django_pdfpool\.E004\]"):
        get_settings()


@pytest.mark.parametrize("key", ["CALLER", "REFUSAL_VIEW"])
@pytest.mark.parametrize("path", [".callers.user_or_ip", "."], ids=["relative", "dot"])
def test_a_dotted_path_that_is_not_one_is_e004_not_a_crash(settings, key, path):
    """import_string() raises TypeError or ValueError for these, not ImportError: the checks
    and get_settings() (so the app's ready()) must not crash on them."""
    (found,) = problems({key: path})
    assert found.id == "django_pdfpool.E004"
    assert found.msg.startswith(f"PDFPOOL[{key!r}] = {path!r} cannot be imported: ")
    settings.PDFPOOL = {key: path}
    with pytest.raises(ImproperlyConfigured, match=r"\[django_pdfpool\.E004\]"):
        get_settings()


@pytest.mark.parametrize("key", ["CALLER", "REFUSAL_VIEW"])
@pytest.mark.parametrize(
    "source, said",
    [
        ("def f(:\n", "SyntaxError: "),
        ("raise RuntimeError('no database yet')\n", "RuntimeError: no database yet"),
    ],
    ids=["syntax-error", "raises"],
)
def test_a_module_that_fails_as_it_is_imported_is_e004_not_a_crash(
    settings, tmp_path, monkeypatch, key, source, said
):
    """The path's module raises something other than ImportError: the checks, and the
    app's ready() through get_settings(), crashed with it instead of naming the key."""
    (tmp_path / "broken_caller.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    (found,) = problems({key: "broken_caller.f"})
    assert found.id == "django_pdfpool.E004"
    assert found.msg.startswith(f"PDFPOOL[{key!r}] = 'broken_caller.f' cannot be imported: {said}")
    settings.PDFPOOL = {key: "broken_caller.f"}
    with pytest.raises(ImproperlyConfigured, match=r"\[django_pdfpool\.E004\]"):
        get_settings()


@pytest.mark.parametrize(
    "key, takes",
    [("CALLER", "the request"), ("REFUSAL_VIEW", "the request and the exception")],
)
def test_a_callable_that_cannot_take_its_arguments_is_e004_not_a_500_on_every_upload(
    settings, key, takes
):
    """It imports and is callable, but every upload (or refusal) raised TypeError."""
    (found,) = problems({key: "os.getcwd"})
    assert found.id == "django_pdfpool.E004"
    assert found.msg == f"PDFPOOL[{key!r}] = 'os.getcwd' cannot be called with {takes}."
    assert problems({key: lambda *anything: None}) == []
    assert problems({key: max}) == []  # a builtin without a signature: taken as it is


@pytest.mark.parametrize(
    "url",
    ["rediss://127.0.0.1:1/0?ssl_cert_reqs=bogus", "redis://127.0.0.1:1/0?retry=x"],
    ids=["RedisError", "AttributeError"],
)
@pytest.mark.parametrize("sentinels", [[], ["127.0.0.1:26379"]], ids=["direct", "sentinel"])
def test_a_redis_url_option_redis_py_refuses_with_its_own_error_is_e007_not_a_crash(
    settings, url, sentinels
):
    """redis-py raises its own errors for some options' values as the (unconnected)
    connection is made: the checks, and the app's ready(), crashed on them."""
    (found,) = problems({"REDIS": {"URL": url, "NAMESPACE": "n", "SENTINELS": sentinels}})
    assert found.id == "django_pdfpool.E007"
    assert found.msg.startswith(f"PDFPOOL['REDIS']['URL'] = {url} cannot be used: ")
    settings.PDFPOOL = {"REDIS": {"URL": url, "NAMESPACE": "n"}}
    with pytest.raises(ImproperlyConfigured, match=r"\[django_pdfpool\.E007\]"):
        get_settings()


@pytest.mark.parametrize(
    "path, value",
    [
        (("REDIS", "SENTINELS"), ["10.0.0.5:²⁶³⁷⁹"]),  # digits to isdigit(), not to int()
        (("REDIS", "SENTINELS"), ["10.0.0.5:" + "0" * 5000]),  # past int()'s 4300 digits
        (("WAIT",), 10**400),  # an int no float holds
        (("TIMEOUT",), 10**400),
        (("DOOR", "BODY_TIMEOUT"), -(10**400)),
        (("SLOTS",), 10**5000),  # past the digits str() writes: no message could quote it
    ],
    ids=["unicode-port", "long-port", "huge-wait", "huge-timeout", "huge-body-timeout", "digits"],
)
def test_a_value_that_only_looks_like_a_number_is_e003_not_a_crash(path, value):
    found = [p for p in problems(raw(path, value)) if p.id == "django_pdfpool.E003"]
    assert [p.msg.split(" must be ")[0] for p in found] == [named(path)]


SECONDS = [
    path for path, declared in EVERY.items() if declared.check.expected.startswith("seconds")
]


@pytest.mark.parametrize("path", SECONDS, ids="/".join)
def test_seconds_past_what_every_timer_counts_are_e003_not_a_failure_at_first_use(path):
    """The child's alarm counts to 2**31 - 1 s, thread waits and socket timeouts to
    threading.TIMEOUT_MAX, Redis to 2**63 ms: a TIMEOUT of 2**31 passed the checks and then
    failed every extraction ("no child could take the job"), a LEASE of 1e308 every call."""
    for value, refused in ((bounds.LONGEST, False), (2**31, True), (1e308, True)):
        found = [p.msg for p in problems(raw(path, value)) if p.id == "django_pdfpool.E003"]
        assert found == (
            [f"{named(path)} must be {EVERY[path].check.expected}, not {value!r}."]
            if refused
            else []
        )
        assert "<= 1e9" in EVERY[path].check.expected


def test_an_extraction_runs_at_the_longest_timeout_and_one_longer_is_refused_before_a_child():
    assert min(threading.TIMEOUT_MAX, 2**31 - 1 - 2) > bounds.LONGEST  # the alarm's margin
    data = pdfs.simple(["as long as it takes"])
    run = functools.partial(sandbox.extract, data, memory_limit=256 << 20, warm=False)
    assert "as long as it takes" in asyncio.run(run(timeout=bounds.LONGEST)).text
    with pytest.raises(ValueError, match=r"^timeout must be seconds > 0 and <= 1e9, not "):
        asyncio.run(run(timeout=float(2**31)))


INTEGERS = [path for path, declared in EVERY.items() if "integer" in declared.check.expected]


@pytest.mark.parametrize("path", INTEGERS, ids="/".join)
def test_integers_past_what_json_and_lua_hold_are_e003_not_a_crash_at_first_use(path):
    """A MEMORY_LIMIT of 2**63 passed the checks, then failed every extraction (setrlimit);
    a MAX_UPLOAD_SIZE of 10**40 crashed the status page and `pdfpool status`."""
    for value, refused in ((bounds.LARGEST, False), (bounds.LARGEST + 1, True), (10**40, True)):
        found = [p.msg for p in problems(raw(path, value)) if p.id == "django_pdfpool.E003"]
        expected = f"{named(path)} must be {EVERY[path].check.expected}, not {value!r}."
        assert found == ([expected] if refused else [])


def test_an_extraction_runs_at_the_largest_memory_limit_and_one_larger_is_refused_before_a_child():
    data = pdfs.simple(["all the memory"])
    run = functools.partial(sandbox.extract, data, timeout=30.0, warm=False)
    assert "all the memory" in asyncio.run(run(memory_limit=bounds.LARGEST)).text
    with pytest.raises(ValueError, match=r"^memory_limit must be bytes, an integer >= 1 and "):
        asyncio.run(run(memory_limit=2**63))


# -- the lower layers' bounds: one object, the same refusals ------------------------------

SHARED_BOUNDS = {
    ("SLOTS",): bounds.SLOTS,
    ("QUEUE",): bounds.QUEUE,
    ("WAIT",): bounds.WAIT,
    ("REDIS", "NAMESPACE"): bounds.NAMESPACE,
    ("REDIS", "LEASE"): bounds.LEASE,
    ("REDIS", "FALLBACK"): bounds.FALLBACK,
    ("REDIS", "TIMEOUT"): bounds.CALL_TIMEOUT,
    ("TIMEOUT",): bounds.TIMEOUT,
    ("MAX_PAGES",): bounds.MAX_PAGES,
    ("ENGINE",): ENGINE,
    ("SANDBOX", "CHILD_ENV"): bounds.CHILD_ENV,
    ("SANDBOX", "REQUIRE"): REQUIRE,
}
SAMPLES = [0, 1, -1, 2, 19, 20, 0.05, 0.1, 2.5, True, False, "2", "", "a{b}", None, math.nan,
           math.inf, ("PATH",), ("A=B",), [], "refuse", "pypdf", "full", NOT_A_SETTING]  # fmt: skip


@pytest.mark.parametrize("path", list(SHARED_BOUNDS), ids="/".join)
def test_a_setting_the_lower_layer_takes_is_checked_by_that_layers_bound(path):
    assert EVERY[path].check is SHARED_BOUNDS[path]


@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_the_pool_refuses_exactly_the_sizes_the_settings_refuse(value):
    for index, key in enumerate(("SLOTS", "QUEUE", "WAIT")):
        terms: list[object] = [2, 4, 1.0]
        terms[index] = value
        refused = bool(problems({key: value}))
        try:
            Pool(*terms)  # type: ignore[arg-type]
        except ValueError:
            assert refused, (key, value)
        else:
            assert not refused, (key, value)


@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_the_redis_pool_refuses_what_the_settings_refuse(value):
    from django_pdfpool.admission.redis.redis_pool import RedisPool

    for key, option in (("LEASE", "lease"), ("NAMESPACE", "namespace"),
                        ("FALLBACK", "fallback"), ("TIMEOUT", "timeout")):  # fmt: skip
        if not problems({"REDIS": {"URL": "redis://127.0.0.1:1/0", key: value}}):
            continue
        args: dict[str, object] = {"url": "redis://127.0.0.1:1/0", "namespace": "n", option: value}
        with pytest.raises(ValueError, match=f"^{option} must be "):
            RedisPool(**args)  # type: ignore[arg-type]


SENTINEL = ["127.0.0.1:26379"]
REDIS_URLS = [  # (URL, SENTINELS, refused): as the pool's connections, made unconnected, take it
    ("redis://127.0.0.1:1/0?ssl_ca_certs=/etc/ssl/ca.pem", [], True),  # ssl_*: rediss:// only
    ("rediss://127.0.0.1:1/0?ssl_ca_certs=/etc/ssl/ca.pem", [], False),
    ("rediss://127.0.0.1:1/0?ssl_validate_ocsp=true", [], True),  # asyncio's connections lack it
    ("redis://127.0.0.1:1/0?timeout=1", [], True),  # the synchronous connections lack it
    ("redis://mymaster/0?ssl_certfile=/etc/ssl/c.pem", SENTINEL, True),
    ("rediss://mymaster/0?ssl_certfile=/etc/ssl/c.pem", SENTINEL, False),
    ("unix:///run/redis.sock?db=1", [], False),
    ("unix:///run/redis.sock", SENTINEL, True),  # no host to name the primary
    ("redis:///0", SENTINEL, True),
    ("redis://127.0.0.1:1/0?socket_timeout=-1", [], True),  # REDIS["TIMEOUT"]'s, taken over
    ("redis://127.0.0.1:1/0?socket_connect_timeout=60", [], True),
    ("redis://127.0.0.1:1/-1", [], True),  # every command refused ("DB index out of range")
    ("redis://127.0.0.1:1/0?db=-1", [], True),
]


@pytest.mark.parametrize(("url", "sentinels", "refused"), REDIS_URLS)
def test_the_redis_url_the_check_passes_is_the_one_the_pool_can_connect_with(
    url, sentinels, refused
):
    """E007, and RedisPool's ValueError, for a URL its connections would refuse at first use
    (a TypeError, or KeyError('host') through Sentinel); nothing is sent to find out."""
    from django_pdfpool.admission.redis.redis_pool import RedisPool

    found = problems({"REDIS": {"URL": url, "NAMESPACE": "n", "SENTINELS": sentinels}})
    assert [p.id for p in found] == (["django_pdfpool.E007"] if refused else [])
    assert all(p.msg.startswith("PDFPOOL['REDIS']['URL'] = ") for p in found)
    addresses = [(host, int(port)) for host, _, port in (s.rpartition(":") for s in sentinels)]
    if refused:
        with pytest.raises(ValueError, match=" cannot be used: "):
            RedisPool(url=url, namespace="n", sentinels=addresses)
    else:
        RedisPool(url=url, namespace="n", sentinels=addresses)


@pytest.mark.parametrize(
    "url, said",
    [
        ("redis://:hun@ter2/x@cache:6379/0", "has an '@' after its host"),  # host "ter2"
        ("redis://:hun@ter2#x@cache:6379/0", "has an '@' after its host"),
        ("redis://cache:6379/db1", "has a path that is not a database number"),  # database 0
        ("redis://cache:6379/1/2", "has a path that is not a database number"),  # database 12
    ],
)
def test_a_redis_url_redis_py_would_read_otherwise_than_written_is_e007(settings, url, said):
    """redis-py takes these without a word, connecting to another host or database: the
    checks passed them and the first upload met a Redis that was not the one meant."""
    (found,) = problems({"REDIS": {"URL": url, "NAMESPACE": "n"}})
    assert found.id == "django_pdfpool.E007"
    assert found.msg.startswith(f"PDFPOOL['REDIS']['URL'] {said}: redis-py ")
    assert "%2F" in found.hint and "ter2" not in found.msg
    assert problems({"REDIS": {"URL": "redis://:hun%40ter2%2Fx@cache/1", "NAMESPACE": "n"}}) == []
    assert problems({"REDIS": {"URL": "unix:///run/redis@main.sock", "NAMESPACE": "n"}}) == []


def test_a_redis_url_option_redis_py_cannot_read_is_named_not_called_no_url():
    """A redis:// URL whose query option has a value redis-py refuses was told it was not a
    redis:// URL; it is the option that is wrong, and the message says which."""
    url = "redis://:hunter2@cache:6379/0?socket_timeout=soon"
    (found,) = problems({"REDIS": {"URL": url, "NAMESPACE": "n"}})
    assert found.id == "django_pdfpool.E007"
    assert found.msg == (
        "PDFPOOL['REDIS']['URL'] = redis://:***@cache:6379/0?socket_timeout=soon cannot be "
        "used: Invalid value for 'socket_timeout' in connection URL."
    )


@pytest.mark.parametrize("value", SAMPLES, ids=repr)
def test_extract_refuses_what_the_settings_refuse(value):
    """Refused before any child starts: the argument's check is the setting's bound."""
    for key, option in (("TIMEOUT", "timeout"), ("MAX_PAGES", "max_pages"), ("ENGINE", "engine")):
        if not problems({key: value}):
            continue
        args: dict[str, object] = {"timeout": 5.0, "memory_limit": 256 << 20, option: value}
        with pytest.raises(ValueError, match=f"^{option} must be "):
            asyncio.run(sandbox.extract(b"%PDF-", **args))  # type: ignore[arg-type]
    if value is None:
        return  # configure()'s None is "leave it as it is"
    if problems({"SANDBOX": {"CHILD_ENV": value}}):
        with pytest.raises(ValueError, match=r"^child_env must be "):
            sandbox.configure(child_env=value)  # type: ignore[arg-type]
    if problems({"SANDBOX": {"REQUIRE": value}}):
        with pytest.raises(ValueError, match=r"^require must be "):
            sandbox.configure(require=value)  # type: ignore[arg-type]
    if not bounds.NICE(value):
        with pytest.raises(ValueError, match=r"^nice must be "):
            sandbox.configure(nice=value)  # type: ignore[arg-type]


def test_child_env_with_an_equals_sign_is_refused_by_the_check_not_at_first_use():
    assert [p.id for p in problems({"SANDBOX": {"CHILD_ENV": ["A=B"]}})] == ["django_pdfpool.E003"]


# -- adding a setting is one entry ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WithOneMore(PoolSettings):
    """The table with one more entry, as a contributor would add it."""

    retries: int = setting(3, integer(0), "times a failed job is tried again.")


def test_one_more_entry_is_a_default_a_check_a_typed_attribute_and_a_row(settings, monkeypatch):
    table = table_of(WithOneMore)
    assert list(table) == [*SETTINGS, "RETRIES"]
    monkeypatch.setattr(conf, "SETTINGS", table)
    monkeypatch.setattr(conf, "DEFAULTS", {key: entry.default for key, entry in table.items()})
    monkeypatch.setattr(conf, "PoolSettings", WithOneMore)
    assert conf.problems({"RETRIES": 1}) == []
    (bad,) = conf.problems({"RETRIES": -1})
    assert bad.msg == "PDFPOOL['RETRIES'] must be an integer >= 0 and <= 2**53, not -1."
    settings.PDFPOOL = {"RETRIES": 5}
    built = conf.get_settings()
    assert isinstance(built, WithOneMore) and built.retries == 5 and built.slots == 2
    written = settings_tables().render(PAGE.read_text())  # what tools/settings_tables.py writes
    assert "| `RETRIES` | `3` | an integer >= 0 and <= 2**53 | times a failed job" in written


def settings_tables():
    """tools/settings_tables.py, which writes docs/settings.md's tables (tests/test_docs.py)."""
    spec = importlib.util.spec_from_file_location(
        "settings_tables", ROOT / "tools" / "settings_tables.py"
    )
    assert spec is not None and spec.loader is not None
    found = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(found)
    return found


def _written_keys(text: str) -> set[str]:
    """The PDFPOOL keys a page names: ``PDFPOOL["KEY"]`` and the keys of ``PDFPOOL = {...}``."""
    found = set(re.findall(r"PDFPOOL\[['\"]([A-Z0-9_]+)['\"]\]", text))
    for literal in re.findall(r"PDFPOOL = \{(.*?)\}", text, flags=re.S):
        found |= set(re.findall(r"['\"]([A-Z0-9_]+)['\"]\s*:", literal))
    return found


def test_the_keys_the_docs_name_are_keys_of_the_table():
    pages = [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    named = {page.name: _written_keys(page.read_text()) for page in pages}
    known = set(SETTINGS).union(*NESTED.values())  # a nested dict's keys are written inside it
    assert set().union(*named.values()) >= {"SLOTS", "CALLER", "REDIS"}  # the scan works
    assert {page: keys - known for page, keys in named.items() if keys - known} == {}
    assert _written_keys('PDFPOOL = {"SLOTZ": 2}\nPDFPOOL["QUEUES"]') == {"SLOTZ", "QUEUES"}


@pytest.mark.parametrize(
    "value",
    [
        {"REDIS": "redis://:hunter2@cache:6379/0"},  # the URL where the dict goes
        {"REDIS": {"URL": b"redis://:hunter2@cache:6379/0"}},
        {"REDIS": {"URL": "redis://cache/0", "SENTINELS": "redis://:hunter2@sentinel:26379"}},
        {"REDIS": {"URL": "redis://cache/0", "SENTINELS": ["redis://:hunter2@sentinel:26379"]}},
    ],
    ids=["redis-a-url", "url-bytes", "sentinels-a-url", "sentinels-urls"],
)
def test_a_redis_password_in_a_refused_value_is_masked_in_the_check_and_the_exception(
    settings, value
):
    """docs/security.md: a Redis URL is shown by ``presentable`` wherever it is shown, a
    check's message and the ImproperlyConfigured raised at first use (logged) included."""
    found = problems(value)
    assert found and all("hunter2" not in f"{p.msg} {p.hint}" for p in found)
    settings.PDFPOOL = value
    with pytest.raises(ImproperlyConfigured) as refused:
        get_settings()
    assert "hunter2" not in str(refused.value)


@pytest.mark.parametrize("url", [None, 42, b"redis://127.0.0.1:1/0"], ids=repr)
def test_a_redis_url_that_fails_its_own_bound_is_e003_alone_not_e007_too(url):
    """As E004 after E003: one problem, one error (an absent URL is E007's)."""
    assert [p.id for p in problems({"REDIS": {"URL": url, "NAMESPACE": "n"}})] == [
        "django_pdfpool.E003"
    ]
