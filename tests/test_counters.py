"""The counter vocabulary (``django_pdfpool.admission.ledger.Counter``) against every place
that names a counter: the Lua scripts both ways (statically, and through a real Redis), the
snapshot's ``Counters``, the status page, the metrics, the ``pdfpool status`` command and
the docs. Who counts what in Redis (``CountedBy``):

- LUA: the script that decides the event tallies it by a literal name, ``tally('joined', 1)``;
- PYTHON: the Python side picks the name (``Counter.ended``: how the job's task ended) and
  hands it to ``finish.lua`` as OUTCOME, which tallies ``ARGV[7]``;
- PROCESS: each process alone, never in Redis (``refused_closed``: a process drains alone).

``refused.lua`` tallies the name the door's refusal hands it (``ARGV[4]``): a LUA counter
counted by a door in the pool's name, never a PROCESS one."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import warnings
from pathlib import Path

import pytest
import redis

import django_pdfpool
from django_pdfpool import get_pool
from django_pdfpool.admission import history
from django_pdfpool.admission.ledger import CountedBy, Counter, Counters, Ledger
from django_pdfpool.exceptions import (
    CallerBusy,
    CoordinatorUnavailable,
    PoolBusy,
    PoolClosed,
    PoolMisconfigured,
)
from django_pdfpool.management.commands import pdfpool as status_report
from django_pdfpool.status import page as status_page
from django_pdfpool.status.metrics import METRICS, Reading, render
from tests.conftest import until

pytest_plugins = ["tests.support.redis_fixtures"]

PACKAGE = Path(django_pdfpool.__file__).resolve().parent  # wherever this test file lives
LUA = PACKAGE / "admission" / "redis" / "lua"
DOCS = PACKAGE.parent / "docs"
URL = "/admin/django_pdfpool/poolstatus/"

# The one tally() whose name is not a literal, per script: what Python hands it.
HANDED = {"finish.lua": "ARGV[7]", "refused.lua": "ARGV[4]"}

TALLY = re.compile(r"\btally\(\s*([^,)]+)")
DEFINITION = re.compile(r"local function tally\(")


def lua_tallies(sources: dict[str, str] | None = None) -> tuple[set[str], dict[str, set[str]]]:
    """The literal names every script tallies, and each script's non-literal arguments."""
    if sources is None:
        sources = {path.name: path.read_text() for path in sorted(LUA.glob("*.lua"))}
    literals: set[str] = set()
    others: dict[str, set[str]] = {}
    for name, text in sources.items():
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        code = DEFINITION.sub("", code)
        for argument in TALLY.findall(code):
            argument = argument.strip()
            literal = re.fullmatch(r"""'(\w+)'|"(\w+)\"""", argument)
            if literal:
                literals.add(literal[1] or literal[2])
            else:
                others.setdefault(name, set()).add(argument)
    return literals, others


def check_lua(literals: set[str], others: dict[str, set[str]]) -> list[str]:
    """What ties the scripts to ``Counter`` both ways; the broken ties, or []."""
    problems = []
    for name in sorted(literals):
        if name not in {c.value for c in Counter}:
            problems.append(f"a script tallies {name!r}, which is no Counter")
        elif Counter(name).counted_by is not CountedBy.LUA:
            problems.append(f"a script tallies {name!r} by name, but it is counted by "
                            f"{Counter(name).counted_by.name}")  # fmt: skip
    for counter in Counter:
        if counter.counted_by is CountedBy.LUA and counter not in literals:
            problems.append(f"{counter!r} is counted by Lua, but no script tallies it")
    if others != {script: {argument} for script, argument in HANDED.items()}:
        problems.append(f"tallies of a name Python hands a script: {others}, not {HANDED}")
    return problems


def test_every_name_a_script_tallies_is_a_counter_and_every_lua_counter_is_tallied():
    assert check_lua(*lua_tallies()) == []


def test_a_stray_name_in_a_script_or_a_member_no_script_counts_is_caught():
    sources = {path.name: path.read_text() for path in LUA.glob("*.lua")}
    stray = dict(sources, **{"admit.lua": sources["admit.lua"] + "\ntally('refused_weird', 1)\n"})
    assert check_lua(*lua_tallies(stray)) == [
        "a script tallies 'refused_weird', which is no Counter"
    ]
    closed = dict(sources, **{"admit.lua": sources["admit.lua"] + "\ntally('refused_closed', 1)"})
    assert "refused_closed" in check_lua(*lua_tallies(closed))[0]  # a process's own, in Redis
    dropped = {name: text.replace("tally('abandoned', 1)", "") for name, text in sources.items()}
    assert check_lua(*lua_tallies(dropped)) == [
        "<Counter.ABANDONED: 'abandoned'> is counted by Lua, but no script tallies it"
    ]
    handed = dict(sources, **{"drop.lua": sources["drop.lua"] + "\ntally(ARGV[6], 1)"})
    assert check_lua(*lua_tallies(handed))[0].startswith("tallies of a name Python hands")


def test_python_hands_finish_lua_exactly_the_python_counters():
    ended = {Counter.ended(cancelled, error) for cancelled in (True, False)
             for error in (None, LookupError("x"))}  # fmt: skip
    assert ended == {c for c in Counter if c.counted_by is CountedBy.PYTHON}
    assert "Counter.ended(" in "".join(p.read_text() for p in (LUA.parent).glob("*.py"))


def test_counters_and_the_ledger_have_one_field_per_counter_in_its_order():
    assert [f.name for f in dataclasses.fields(Counters)] == [c.value for c in Counter]
    books = Ledger(1)
    for n, counter in enumerate(Counter, 1):
        books.count(counter, n)
    counters = books.snapshot(queue=1, wait=None, closed=False, jobs=()).counters
    assert counters == Counters(**{c.value: n for n, c in enumerate(Counter, 1)})
    assert [counters[c] for c in Counter] == list(range(1, len(Counter) + 1))
    assert counters.as_dict() == vars(counters) == dataclasses.asdict(counters)
    with pytest.raises(TypeError):
        Counters(refused_weird=1)


def test_every_counter_has_a_label_a_meaning_and_metrics_a_refusal_a_reason():
    assert len({c.label for c in Counter}) == len(Counter)
    assert all(c.meaning and c.label for c in Counter)
    refusals = [c for c in Counter if c.value.startswith("refused_")]
    assert refusals == [c for c in Counter if c.reason is not None]
    kinds = (PoolBusy, CallerBusy, PoolClosed, CoordinatorUnavailable, PoolMisconfigured)
    assert [c.reason for c in refusals] == [kind.code for kind in kinds]
    for kind in kinds:  # each its own, though a CoordinatorUnavailable is a PoolBusy
        assert Counter.refused(kind()).refusal is kind, kind


def test_the_status_page_the_metrics_and_the_command_show_every_counter(pdfpool, admin_client):
    pdfpool()
    page = admin_client.get(URL).content.decode()
    data = admin_client.get(URL, {"format": "json"}).json()
    assert list(data["counters"]) == [c.value for c in Counter]
    for counter in Counter:
        assert f'data-field="counters.{counter}"' in page, counter
        assert f">{counter.label}</th>" in page and f'title="{counter.meaning}"' in page
    snapshot = get_pool().snapshot()
    text = render(Reading.now(snapshot, 1.0, 1))
    for counter in Counter:
        sample = f'event="{counter}"' if counter.reason is None else f'reason="{counter.reason}"'
        assert sample in text, counter
    assert {m.name for m in METRICS} >= {"pdfpool_jobs_total", "pdfpool_refused_total"}
    data = status_report.annotate(status_page.status_data(), fresh=False)
    report = status_report.status_text(data)
    for counter in Counter:
        assert counter.label in report and counter.meaning in report


def test_the_page_and_the_chart_hold_no_counter_name_of_their_own():
    """The template and status.js show counters by the data-field the server renders from
    ``Counter``: no name written out again (the chart's refusals are summed server-side,
    ``history.REFUSALS``)."""
    script = (PACKAGE / "static" / "django_pdfpool" / "status.js").read_text()
    templates = "".join(
        p.read_text() for p in (PACKAGE / "templates" / "admin" / "django_pdfpool").glob("*.html")
    )
    for counter in Counter:  # as a string, or a property: "started", 'started', .started
        assert not re.search(rf"[\"'.]{counter}\b", script), counter
        assert not re.search(rf"[\"'.]{counter}\b", templates), counter
    assert set(history.REFUSALS) == {c for c in Counter if c.reason is not None}


def test_the_docs_point_to_the_one_table_of_counters():
    """docs/status.md (the JSON fields) and the metrics' rows send the reader to the
    generated table (below) instead of listing the counters again."""
    assert "metrics.md#the-counters" in (DOCS / "status.md").read_text()
    metrics = (DOCS / "metrics.md").read_text()
    for metric in ("pdfpool_jobs_total", "pdfpool_refused_total"):
        row = next(line for line in metrics.splitlines() if line.startswith(f"| `{metric}`"))
        assert "(#the-counters)" in row, metric


def test_history_sample_is_renamed_history_point_with_no_alias():
    """Renamed before the first release: the old name is gone (as moved modules are)."""
    assert not hasattr(history, "Sample")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert history.HistoryPoint(1.0, 0, 0, 0).refused == 0


# --- the docs' table of counters, generated --------------------------------------------

BEGIN = "<!-- counters: generated from Counter by `python -m tests.test_counters`; do not edit -->"
END = "<!-- end of counters -->"
COUNTED_IN_REDIS = {
    CountedBy.LUA: "script",
    CountedBy.PYTHON: "process, sent to Redis",
    CountedBy.PROCESS: "this process only",
}


def counters_table() -> str:
    rows = [
        "| counter | on the status page | what it counts | metric sample | in Redis |",
        "|---------|--------------------|----------------|---------------|----------|",
    ]
    for c in Counter:
        sample = f'`pdfpool_jobs_total{{event="{c}"}}`'
        if c.reason is not None:
            sample = f'`pdfpool_refused_total{{reason="{c.reason}"}}`'
        where = COUNTED_IN_REDIS[c.counted_by]
        rows.append(f"| `{c}` | {c.label} | {c.meaning} | {sample} | {where} |")
    return "\n".join(rows)


def docs_with_table(text: str) -> str:
    head, rest = text.split(BEGIN + "\n", 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{counters_table()}\n{END}{tail}"


def test_the_docs_table_of_counters_is_the_enum():
    text = (DOCS / "metrics.md").read_text()
    assert text == docs_with_table(text), "run `python -m tests.test_counters` to rewrite it"


if __name__ == "__main__":  # rewrite docs/metrics.md's table from Counter
    path = DOCS / "metrics.md"
    path.write_text(docs_with_table(path.read_text()))


# --- through a real Redis: the names the scripts write in the cluster's books -----------


def test_redis_books_hold_exactly_the_counters_lua_and_python_count(make_pool, redis_server,
                                                                    namespace):  # fmt: skip
    """Every event once, in one pool: the ``stats`` hash then names each counter that is
    not a process's own, and nothing else (but ``since``)."""
    gates = {name: threading.Event() for name in "abf"}

    def job(result, gate):
        async def fn():
            while not gate.is_set():
                await asyncio.sleep(0.002)
            if isinstance(result, BaseException):
                raise result
            return result

        return fn

    async def scenario():
        pool = make_pool(1, 2, None, on_error=lambda key, exc: None)
        a = asyncio.create_task(pool.run("a", "ca", job("A", gates["a"])))  # started
        await until(lambda: pool.running() == 1)
        shared = asyncio.create_task(pool.run("a", "s1", None))  # joined
        b = asyncio.create_task(pool.run("b", "cb", job(LookupError("b"), gates["b"])))
        c = asyncio.create_task(pool.run("c", "cc", job("C", gates["a"])))
        await until(lambda: pool.queued() == 2 and pool.local_snapshot().counters.joined == 1)
        with pytest.raises(PoolBusy):  # refused_busy: the queue is full
            await pool.run("d", "cd", job("D", gates["a"]))
        with pytest.raises(CallerBusy):  # refused_caller
            await pool.run("e", "ca", job("E", gates["a"]))
        pool.count_refusal(CallerBusy("at the door", 1.0))  # refused.lua
        c.cancel()  # abandoned: its only waiter left the queue
        await until(lambda: pool.queued() == 1)
        gates["a"].set()  # completed
        assert await asyncio.gather(a, shared) == ["A", "A"]
        gates["b"].set()  # failed
        with pytest.raises(LookupError):
            await b
        f = asyncio.create_task(pool.run("f", "cf", job("F", gates["f"])))
        await until(lambda: pool.running() == 1)
        await pool.stop()  # cancelled
        with pytest.raises(PoolClosed):
            await f
        with pytest.raises(PoolClosed):  # refused_closed: this process's own
            await pool.run("g", "cg", job("G", gates["f"]))
        assert pool.local_snapshot().counters[Counter.REFUSED_CLOSED] == 2  # cf at stop, cg

    asyncio.run(asyncio.wait_for(scenario(), 30))
    with redis.Redis.from_url(redis_server.url, decode_responses=True) as client:
        stats = client.hgetall("{" + namespace + "}:stats")
    stats.pop("since")
    assert set(stats) == {c.value for c in Counter if c.counted_by is not CountedBy.PROCESS}
    assert int(stats["refused_caller"]) == 2  # the pool's, and the door's through refused.lua


@pytest.mark.parametrize("kind", ["local", "redis"])
def test_every_caller_stop_answers_counts_as_refused_closed(kind, request):
    """``stop()``: the callers of the running job (two sharers) and of the queued one each
    got PoolClosed: three refused_closed, as the metric counts every such 503."""
    from django_pdfpool.admission import Pool

    make = request.getfixturevalue("make_pool") if kind == "redis" else Pool
    gate = threading.Event()

    async def held():
        while not gate.is_set():
            await asyncio.sleep(0.002)

    async def scenario():
        pool = make(1, 1, None)
        calls = [asyncio.create_task(pool.run("a", "c1", held))]
        await until(lambda: pool.running() == 1)
        calls.append(asyncio.create_task(pool.run("a", "c2", None)))
        await until(lambda: pool.waiting("a") == 1)
        calls.append(asyncio.create_task(pool.run("b", "c3", held)))
        await until(lambda: pool.queued() == 1)
        await pool.stop()
        for call in calls:
            with pytest.raises(PoolClosed):
                await call
        snapshot = pool.local_snapshot() if kind == "redis" else pool.snapshot()
        assert snapshot.counters[Counter.REFUSED_CLOSED] == 3

    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        gate.set()
