"""Figures the docs give in prose, held against the code that makes them."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from django.test import override_settings

from django_pdfpool.admission.redis.redis_pool import MAX_RESULT_BYTES
from django_pdfpool.conf import get_settings
from django_pdfpool.configured import _build

DOCS = Path(__file__).resolve().parents[1] / "docs"
MiB = 1 << 20


def prose(page: str) -> str:
    return " ".join((DOCS / page).read_text().split())


def test_the_result_limit_across_processes_is_the_one_a_project_builds():
    """cluster.md: RedisPool's default, and what the settings' defaults give (the pool is
    built, never connected)."""
    said = prose("cluster.md")
    default = re.search(r"`RedisPool`'s argument \((\d+) MiB by default\)", said)
    built = re.search(r"about (\d+) MiB with the defaults", said)
    assert default and built, "cluster.md gives both limits"
    redis = {"URL": "redis://127.0.0.1:1/0", "NAMESPACE": "docs-claims"}
    with override_settings(PDFPOOL={"REDIS": redis}):
        pool = _build(get_settings())
    assert int(default[1]) == MAX_RESULT_BYTES // MiB
    assert int(built[1]) == round(pool._settings.max_result_bytes / MiB)


def test_what_the_parent_reads_past_the_text_cap_is_the_answers_overhead():
    from django_pdfpool.sandbox.wire import ANSWER_OVERHEAD

    said = re.search(r"at most this plus about ([\d.]+) MiB of answer", prose("settings.md"))
    assert said, "settings.md says what the parent reads past MAX_TEXT_BYTES"
    assert float(said[1]) == round(ANSWER_OVERHEAD / MiB, 1)


def test_the_answers_table_names_every_refusal_with_its_status():
    """usage.md's "answers the view never sees": each code an entry answers, at its status,
    with Retry-After where the answer has one."""
    from django_pdfpool import exceptions
    from django_pdfpool.responses import describe

    page = (DOCS / "usage.md").read_text()
    table = page.split("### Answers the view never sees", 1)[1].split("\n\n", 2)[1]
    rows = set()  # (code, status, says Retry-After): too_large is both 413 and 422
    for line in table.splitlines()[2:]:
        _, status, codes, retry = (cell.strip() for cell in line.strip("|").split(" | "))
        for code in re.findall(r"`(\w+)`", codes):
            rows.add((code, int(status), retry == "yes"))
    bases = (exceptions.Refused, exceptions.UploadRejected)
    failures: list[Exception] = [
        cls()
        for cls in vars(exceptions).values()
        if isinstance(cls, type) and cls not in bases and issubclass(cls, bases)
    ]
    failures += [exceptions.ExtractionError(code) for code in exceptions.EXTRACTION_MESSAGES]
    for failure in failures:
        said = describe(failure)  # type: ignore[arg-type]
        assert (said.code, said.status, said.retry_after is not None) in rows, said


def test_the_childrens_minimum_environment_is_the_one_they_get():
    """settings.md names every variable a child inherits without CHILD_ENV."""
    from django_pdfpool.sandbox.children import BASE_ENV

    said = re.search(r"An extraction child inherits the minimum \(([^)]*)\)", prose("settings.md"))
    assert said, "settings.md lists the children's minimum environment"
    assert set(re.findall(r"`(\w+\*?)`", said[1])) == {*BASE_ENV, "LC_*"}


def test_every_pdfpool_setting_the_docs_show_passes_the_checks():
    """A PDFPOOL dict copied from any page passes `manage.py check` (but for the modules of
    the reader's own project it names)."""
    from django_pdfpool.conf import problems
    from tests.test_docs import python_blocks

    shown = [
        (where, ast.literal_eval(node.value))
        for where, block in python_blocks()
        for node in ast.walk(ast.parse(block.body))
        if isinstance(node, ast.Assign)
        and "PDFPOOL" in [getattr(t, "id", "") for t in node.targets]
    ]
    assert len(shown) >= 5, "the pages show their settings"
    for where, setting in shown:
        found = [
            p
            for p in problems(setting)
            if "cannot be imported: No module named 'myapp'" not in p.msg
        ]
        assert found == [], where


def test_the_figures_the_pages_give_are_the_codes_constants():
    """Defaults and limits quoted in prose: each regex finds the page's figure, which must be
    the constant behind it."""
    import inspect

    from django_pdfpool import KeptThreads
    from django_pdfpool.apps import STALE_MARGIN
    from django_pdfpool.asgi import LINGER_BYTES, LINGER_SECONDS
    from django_pdfpool.sandbox.children import MAX_READY, READY_IDLE
    from django_pdfpool.sandbox.wire import DEFAULT_NICE, MAX_ANSWER_PAGES

    keep = inspect.signature(KeptThreads).parameters["keep"].default
    claims = [
        ("deployment.md", r"`keep` \((\d+)\) bounds the idle threads", keep),
        ("deployment.md", r"called once at start-up \((\d+) by default", DEFAULT_NICE),
        ("deployment.md", r"`WAIT \+ TIMEOUT \+ (\d+) s` ago", STALE_MARGIN),
        ("architecture.md", r"keeps up to (\d+) \*ready\*", MAX_READY),
        ("architecture.md", r"gone after (\d+) s idle", READY_IDLE),
        ("security.md", r"for at most (\d+) s and \d+ MiB", LINGER_SECONDS),
        ("security.md", r"for at most \d+ s and (\d+) MiB", LINGER_BYTES / MiB),
        ("security.md", r"over ([\d,]+) pages is `too_large`", MAX_ANSWER_PAGES),
    ]
    for page, said, constant in claims:
        found = re.search(said, prose(page))
        assert found, f"{page} no longer says {said!r}"
        assert float(found[1].replace(",", "")) == constant, (page, said)
