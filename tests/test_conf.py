"""The settings table (``conf.PoolSettings``'s fields): each PDFPOOL key declared once, and
everything else made from it: ``DEFAULTS``, the typed ``PoolSettings``, ``problems()`` (the
checks and ``get_settings()``), and docs/settings.md. A key added to the table is in all of
them; a bound a lower layer owns is the same object in the table and refuses the same values
there as an argument."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from pathlib import Path

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

import mkdocs_hooks
from django_pdfpool import conf
from django_pdfpool.admission import pool_limits
from django_pdfpool.admission.local import Pool
from django_pdfpool.admission.redis import options as redis_options
from django_pdfpool.bounds import integer
from django_pdfpool.conf import (
    DEFAULTS,
    SECTIONS,
    SETTINGS,
    PoolSettings,
    get_settings,
    problems,
    setting,
    table_of,
)
from django_pdfpool.sandbox import extract as sandbox
from django_pdfpool.sandbox import job_limits

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "settings.md"


class _NotASetting:
    """A value every check refuses (not a number, a string, a bool or None), with a stable id."""

    def __repr__(self) -> str:
        return "NOT_A_SETTING"


NOT_A_SETTING = _NotASetting()


def test_every_key_of_the_table_is_a_typed_field_a_default_and_a_check():
    names = [f.name for f in dataclasses.fields(PoolSettings)]
    assert list(SETTINGS) == [name.upper() for name in names]
    assert list(DEFAULTS) == list(SETTINGS)
    hints = PoolSettings.__annotations__
    for key, declared in SETTINGS.items():
        assert hints[key.lower()], key  # a typed attribute
        assert DEFAULTS[key] is declared.default
        assert declared.check(declared.default), f"{key}'s default fails its own check"
        assert declared.section in SECTIONS, key
        assert declared.help and "|" not in declared.help and "\n" not in declared.help, key


def test_the_defaults_build_the_settings(settings):
    settings.PDFPOOL = {}
    built = get_settings()
    for key, declared in SETTINGS.items():
        assert getattr(built, key.lower()) == declared.convert(declared.default), key
    assert (built.wait, built.timeout, built.redis_sentinels) == (10.0, 30.0, ())
    assert callable(built.caller) and callable(built.refusal_view)


@pytest.mark.parametrize("key", list(SETTINGS))
def test_a_bad_value_of_every_key_is_e003_naming_what_it_must_be(settings, key):
    expected = SETTINGS[key].check.expected
    (problem,) = problems({key: NOT_A_SETTING})
    assert problem.id == "django_pdfpool.E003"
    assert problem.msg == f"PDFPOOL[{key!r}] must be {expected}, not {NOT_A_SETTING!r}."
    settings.PDFPOOL = {key: NOT_A_SETTING}
    with pytest.raises(
        ImproperlyConfigured, match=re.escape(f"[django_pdfpool.E003] PDFPOOL[{key!r}]")
    ):
        get_settings()


def test_the_messages_stay_as_they_were():
    """The words of the checks users already know (tests/e2e/test_example.py reads two of them)."""
    found = {p.msg for p in problems({"SLOTS": 0, "WAIT": "soon", "MEMORY_LIMIT": 1024})}
    assert found == {
        "PDFPOOL['SLOTS'] must be an integer >= 1, not 0.",
        "PDFPOOL['WAIT'] must be seconds >= 0, or None, not 'soon'.",
        "PDFPOOL['MEMORY_LIMIT'] must be bytes, an integer >= 128 MiB, not 1024.",
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
    assert [p.id for p in problems({"BACKEND": "redis"})] == ["django_pdfpool.E007"]
    assert problems({"BACKEND": "redis", "REDIS_URL": "redis://127.0.0.1:1/0"}) == []
    assert [p.id for p in problems({"CALLER": 42})] == ["django_pdfpool.E003"]


# -- the lower layers' bounds: one object, the same refusals ------------------------------

SHARED_BOUNDS = {
    "SLOTS": pool_limits.SLOTS,
    "QUEUE": pool_limits.QUEUE,
    "WAIT": pool_limits.WAIT,
    "NAMESPACE": redis_options.NAMESPACE,
    "LEASE": redis_options.LEASE,
    "REDIS_FALLBACK": redis_options.FALLBACK,
    "REDIS_TIMEOUT": redis_options.CALL_TIMEOUT,
    "TIMEOUT": job_limits.TIMEOUT,
    "MAX_PAGES": job_limits.MAX_PAGES,
    "ENGINE": job_limits.ENGINE,
    "CHILD_ENV": job_limits.CHILD_ENV,
    "CHILD_NICE": job_limits.CHILD_NICE,
    "SANDBOX_REQUIRE": job_limits.REQUIRE,
}
SAMPLES = [0, 1, -1, 2, 19, 20, 0.05, 0.1, 2.5, True, False, "2", "", "a{b}", None, math.nan,
           math.inf, ("PATH",), ("A=B",), [], "refuse", "pypdf", "full", NOT_A_SETTING]  # fmt: skip


@pytest.mark.parametrize("key", list(SHARED_BOUNDS))
def test_a_setting_the_lower_layer_takes_is_checked_by_that_layers_bound(key):
    assert SETTINGS[key].check is SHARED_BOUNDS[key]


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
                        ("REDIS_FALLBACK", "fallback"), ("REDIS_TIMEOUT", "timeout")):  # fmt: skip
        if not problems({key: value}):
            continue
        args: dict[str, object] = {"url": "redis://127.0.0.1:1/0", "namespace": "n", option: value}
        with pytest.raises(ValueError, match=f"^{option} must be "):
            RedisPool(**args)  # type: ignore[arg-type]


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
    if problems({"CHILD_ENV": value}):
        with pytest.raises(ValueError, match=r"^child_env must be "):
            sandbox.configure(child_env=value)  # type: ignore[arg-type]
    if problems({"SANDBOX_REQUIRE": value}):
        with pytest.raises(ValueError, match=r"^require must be "):
            sandbox.configure(require=value)  # type: ignore[arg-type]
    if problems({"CHILD_NICE": value}):
        with pytest.raises(ValueError, match=r"^nice must be "):
            sandbox.configure(nice=value)  # type: ignore[arg-type]


def test_child_env_with_an_equals_sign_is_refused_by_the_check_not_at_first_use():
    assert [p.id for p in problems({"CHILD_ENV": ["A=B"]})] == ["django_pdfpool.E003"]


# -- adding a setting is one entry ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class WithOneMore(PoolSettings):
    """The table with one more entry, as a contributor would add it."""

    retries: int = setting(3, integer(0), "times a failed job is tried again.", conf.LIMITS)


def test_one_more_entry_is_a_default_a_check_a_typed_attribute_and_a_row(settings, monkeypatch):
    table = table_of(WithOneMore)
    assert list(table) == [*SETTINGS, "RETRIES"]
    monkeypatch.setattr(conf, "SETTINGS", table)
    monkeypatch.setattr(conf, "DEFAULTS", {key: entry.default for key, entry in table.items()})
    monkeypatch.setattr(conf, "PoolSettings", WithOneMore)
    monkeypatch.setattr(mkdocs_hooks, "SETTINGS", table)
    assert conf.problems({"RETRIES": 1}) == []
    (bad,) = conf.problems({"RETRIES": -1})
    assert bad.msg == "PDFPOOL['RETRIES'] must be an integer >= 0, not -1."
    settings.PDFPOOL = {"RETRIES": 5}
    built = conf.get_settings()
    assert isinstance(built, WithOneMore) and built.retries == 5 and built.slots == 2
    assert "| `RETRIES` | `3` | an integer >= 0 | times a failed job" in mkdocs_hooks.render(
        PAGE.read_text()
    )


# -- the settings page ----------------------------------------------------------------------


def test_the_settings_page_has_every_key_once_in_its_section():
    rendered = mkdocs_hooks.render(PAGE.read_text())
    assert "<!-- settings:" not in rendered
    for section in SECTIONS:
        assert f"<!-- settings: {section} -->" in PAGE.read_text(), section
    for key, declared in SETTINGS.items():
        rows = [line for line in rendered.splitlines() if line.startswith(f"| `{key}` |")]
        assert len(rows) == 1, key
        assert f"| {declared.check.expected} | {declared.help} |" in rows[0], key
        table = mkdocs_hooks.settings_table(declared.section)
        assert rows[0] in table.splitlines(), key


def test_the_defaults_are_written_as_a_reader_would():
    table = "\n".join(map(mkdocs_hooks.settings_table, SECTIONS))
    assert '| `ENGINE` | `"pypdf"` |' in table
    assert "| `MEMORY_LIMIT` | 512 MiB |" in table
    assert "| `MAX_PAGES` | `None` |" in table
    with pytest.raises(ValueError):
        mkdocs_hooks.settings_table("nowhere")


def test_the_site_is_built_with_the_hook():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert "mkdocs_hooks.py" in config["hooks"]
    assert any("settings.md" in str(entry) for entry in config["nav"])


def _written_keys(text: str) -> set[str]:
    """The PDFPOOL keys a page names: ``PDFPOOL["KEY"]`` and the keys of ``PDFPOOL = {...}``."""
    found = set(re.findall(r"PDFPOOL\[['\"]([A-Z0-9_]+)['\"]\]", text))
    for literal in re.findall(r"PDFPOOL = \{(.*?)\}", text, flags=re.S):
        found |= set(re.findall(r"['\"]([A-Z0-9_]+)['\"]\s*:", literal))
    return found


def test_the_keys_the_docs_name_are_keys_of_the_table():
    pages = [*(ROOT / "docs").glob("*.md"), ROOT / "README.md"]
    named = {page.name: _written_keys(page.read_text()) for page in pages}
    assert set().union(*named.values()) >= {"SLOTS", "CALLER", "BACKEND"}  # the scan works
    assert {
        page: keys - set(SETTINGS) for page, keys in named.items() if keys - set(SETTINGS)
    } == {}
    assert _written_keys('PDFPOOL = {"SLOTZ": 2}\nPDFPOOL["QUEUES"]') == {"SLOTZ", "QUEUES"}
