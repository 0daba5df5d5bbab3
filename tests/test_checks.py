"""The system checks of the PDFPOOL setting (checks.py): every problem of ``conf.problems``
is one error with the same id, message and hint, and ``get_settings()`` raises on the same
ones with the same words where checks do not run."""

from __future__ import annotations

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from django_pdfpool import sandbox
from django_pdfpool.checks import check_redis_namespace, check_sandbox, check_settings
from django_pdfpool.conf import RedisSettings, get_settings, problems, table_of

MANY_WRONG = {
    "SLOTZ": 2,  # E002
    "SLOTS": 0,  # E003
    "WAIT": "soon",  # E003
    "CALLER": "no.such.module.caller",  # E004
    "REDIS": {},  # E007: no URL
    "DOOR_BUDGET": 3,  # E008: moved into DOOR
}


def test_every_problem_is_one_error_with_its_id_message_and_hint(settings):
    settings.PDFPOOL = MANY_WRONG
    found = problems(MANY_WRONG)
    errors = check_settings()
    assert [type(e) for e in errors] == [checks.Error] * len(found)
    assert [(e.id, e.msg, e.hint) for e in errors] == [(p.id, p.msg, p.hint or None) for p in found]
    assert sorted({e.id for e in errors}) == [
        "django_pdfpool.E002", "django_pdfpool.E003", "django_pdfpool.E004",
        "django_pdfpool.E007", "django_pdfpool.E008",
    ]  # fmt: skip


def test_the_settings_refuse_to_build_with_the_checks_words(settings):
    settings.PDFPOOL = MANY_WRONG
    with pytest.raises(ImproperlyConfigured) as refused:
        get_settings()
    for error in check_settings():
        assert f"[{error.id}] {error.msg}" in str(refused.value)


def test_good_settings_have_no_problem(settings):
    settings.PDFPOOL = {"SLOTS": 1, "QUEUE": 0, "WAIT": None, "DOOR": False}
    assert check_settings() == []
    assert get_settings().slots == 1


def test_a_wrong_setting_is_reported_once_not_again_by_the_sandbox_check(settings):
    settings.PDFPOOL = {"SANDBOX": {"REQUIRE": "everything"}}
    assert [e.id for e in check_settings()] == ["django_pdfpool.E003"]
    assert check_sandbox() == []


def test_e021_with_the_layers_turned_off_names_layers_not_the_host(pdfpool):
    """The host may give every layer: the setting turned them off, and says how to fix it."""
    pdfpool(SANDBOX={"LAYERS": False, "REQUIRE": "basic"})
    try:
        (error,) = [m for m in check_sandbox() if m.id == "django_pdfpool.E021"]
    finally:
        sandbox.configure(sandbox=True, require="none")  # as the other tests expect it
    assert error.msg == (
        "PDFPOOL['SANDBOX']['REQUIRE'] is 'basic' but LAYERS is False: every extraction will "
        "be refused (503)."
    )
    assert "SANDBOX['LAYERS'] to True" in error.hint


@pytest.mark.parametrize(
    ("namespace", "warned"),
    [(None, True), (table_of(RedisSettings)["NAMESPACE"].default, True), ("mine", False)],
)
def test_w001_reads_the_default_namespace_from_the_table(settings, namespace, warned):
    value = {"URL": "redis://127.0.0.1:1/0"}
    if namespace is not None:
        value["NAMESPACE"] = namespace
    settings.PDFPOOL = {"REDIS": value}
    assert [w.id for w in check_redis_namespace()] == (["django_pdfpool.W001"] if warned else [])


def test_a_moved_key_is_a_check_error_naming_its_home(settings):
    settings.PDFPOOL = {"REDIS_URL": "redis://h/0", "CHILD_NICE": 5}
    errors = check_settings()
    assert [(e.id, e.msg) for e in errors] == [
        ("django_pdfpool.E008", "PDFPOOL['REDIS_URL'] moved: use PDFPOOL['REDIS']['URL']."),
        ("django_pdfpool.E008", "PDFPOOL['CHILD_NICE'] moved: use the argument "
         "django_pdfpool.sandbox.configure(nice=...)."),
    ]  # fmt: skip


def test_the_memory_check_warns_when_the_slots_exceed_what_the_process_may_use(settings):
    from django_pdfpool.checks import check_memory
    from django_pdfpool.status.envelope import memory_allowed

    allowed, source = memory_allowed()
    settings.PDFPOOL = {"SLOTS": 1, "MEMORY_LIMIT": allowed}  # plus the server: over
    (warning,) = check_memory()
    assert warning.id == "django_pdfpool.W031" and isinstance(warning, checks.Warning)
    assert f"1 x {allowed >> 20} MiB" in warning.msg and source in warning.msg
    settings.PDFPOOL = {"SLOTS": 1, "MEMORY_LIMIT": 128 << 20}
    assert check_memory() == []


def test_settings_without_root_urlconf_pass_the_url_checks_as_djangos_own_do(settings):
    """A reusable app's test settings or a worker's may have no ROOT_URLCONF: Django's URL
    check then finds nothing to check, and so does W101's."""
    del settings.ROOT_URLCONF
    assert checks.run_checks(tags=[checks.Tags.urls]) == []
