"""The status page's data: one reading of the pool as JSON (``status_data``, docs/status.md)
and as the template's rows (``status_context``), formatted as ``status.js`` formats them."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import socket
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import DatabaseError
from django.utils import timezone

from ..admission.ledger import CountedBy, Counter
from ..conf import get_settings
from ..configured import get_pool, recorder
from ..door import door_status
from ..sandbox.extract import child_starts, sandbox_layers
from .envelope import envelope

SHORT_HEX = 12  # hex digits of a key's digest shown on the page; the full key is a tooltip
CHART_W, CHART_H = 600, 100  # the charts' SVG viewBox; stretched to the page's width
CONFIG = [  # (label, field, format)
    ("Slots", "slots", "int"),
    ("Queue", "queue", "int"),
    ("Wait", "wait", "seconds"),
    ("Timeout", "timeout", "seconds"),
    ("Memory limit", "memory_limit", "bytes"),
    ("Max upload", "max_upload_size", "bytes"),
    ("Engine", "engine", "text"),
]
COUNTERS = [(c.label, c.value, c.meaning) for c in Counter]  # (label, field under "counters", help)
PROCESS_ONLY = {c.value for c in Counter if c.counted_by is CountedBy.PROCESS}  # not in Redis
SEE_OWN = ": see this process's column"  # ends a PROCESS_ONLY counter's help on the page
DURATIONS = [("Queue wait", "queue_wait"), ("Run time", "run_time")]  # columns
DURATION_ROWS = [("Jobs", "count", "int"), ("Mean", "mean", "figure")]  # "figure": a duration
DURATION_ROWS += [("p95", "p95", "figure"), ("Max", "max", "figure")]
CONF_FIELDS = ("timeout", "memory_limit", "max_upload_size", "engine")  # settings
LOCAL_FIELDS = ("running", "queued", "counters", "queue_wait", "run_time", "counted_since")
_USER = "user:"  # callers.user_or_ip's caller for a signed-in user: user:<pk>


def short_key(key: str) -> str:
    """``pkg.module.job:<sha256>`` -> ``job:<first 12 hex>``; other keys unchanged."""
    name, sep, digest = key.rpartition(":")
    return f"{name.rsplit('.', 1)[-1]}:{digest[:SHORT_HEX]}" if sep else key


def status_data() -> dict[str, Any]:
    """The pool (with Redis: the cluster, and this process's part), settings and recent
    history, JSON-ready; ``scope`` says whose the counters and figures are."""
    recorder.start()  # the chart has a history from the first look on
    conf, pool = get_settings(), get_pool()
    cluster = pool.cluster_snapshot()  # one reading: its ``cluster`` is what snapshot() gives
    data = (pool.snapshot() if cluster is None else cluster.cluster).as_dict()
    data["jobs"] = sorted(data["jobs"], key=lambda j: (j["state"] != "running", j["queued_at"]))
    for job in data["jobs"]:
        job["short_key"] = short_key(job["key"])
    door = {"on": conf.door is not None, **door_status()}  # off: its terms are defaults
    callers = [*data["jobs"], *door["held"]]  # a job's caller, a body's at the door
    names = _caller_names(entry["caller"] for entry in callers)
    for entry in callers:
        entry["caller_name"] = names.get(entry["caller"])
    data |= {name: getattr(conf, name) for name in CONF_FIELDS}
    data["backend"] = "local" if conf.redis is None else "redis"
    starts, found = child_starts(), sandbox_layers()  # how children start; their sandbox
    template = "starting" if starts.template_pid is None else f"pid {starts.template_pid}"
    layers = {layer: "on" for layer in found.layers}
    layers.update((layer, f"missing: {why}") for layer, why in found.missing.items())
    shown = None  # a Redis pool's mode, which process holds what, and this process's part
    if cluster is not None:
        shown = dataclasses.asdict(cluster)
        local, _ = shown.pop("local"), shown.pop("cluster")  # "cluster": the top level above
        shown["local"] = {field: local[field] for field in LOCAL_FIELDS}
    return data | {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "history": recorder.as_dict(),
        "cluster": shown,
        "children": {
            "forked": starts.forked,
            "cold": starts.cold,
            "template": template if starts.enabled else "off (configure(warm=False))",
            "ready": starts.ready,
            "restarts": max(0, starts.template_starts - 1),
        },
        "sandbox": {
            "level": found.level if found.enabled else "off (SANDBOX is False)",
            "required": found.required,
            "refusing": not found.sufficient,
            "landlock_abi": found.landlock_abi,
            "layers": layers,
        },
        "door": door,
        "memory": envelope(conf.slots, conf.memory_limit),
    }


def _caller_names(callers: Iterable[str]) -> dict[str, str]:
    """``user:<pk>`` callers -> usernames, in one query, whatever the user model's key (an
    integer, a UUID...); other callers, and any without django.contrib.auth, as they are."""
    named = {caller.removeprefix(_USER) for caller in callers if caller.startswith(_USER)}
    if not named:
        return {}
    try:
        model = get_user_model()
    except ImproperlyConfigured:  # no user model installed: a project without auth
        return {}
    pks = set()
    for pk in named:
        with contextlib.suppress(ValidationError):  # no key of the user model
            pks.add(model._meta.pk.to_python(pk))
    if not pks:
        return {}
    try:
        users = model._default_manager.filter(pk__in=pks)
        return {f"{_USER}{user.pk}": user.get_username() for user in users}
    except (OverflowError, DatabaseError):  # a key past what its column holds; no table
        return {}


def fmt(value: Any, kind: str) -> str:
    """Format a field for the page; ``status.js`` has the same rules."""
    if kind == "seconds":
        if value is None:
            return "no limit"
        if value < 1:
            return f"{_fixed(value * 1000, 0)} ms"
        if value < 10:
            return f"{_fixed(value, 1)} s"
        if value < 59.5:
            return f"{_fixed(value, 0)} s"
        minutes, seconds = divmod(int(value + 0.5), 60)  # as JS's Math.round
        return f"{minutes} min" if not seconds else f"{minutes} min {seconds:02d} s"
    if kind == "lease":  # a process's lease in Redis; ended: not yet reaped
        return f"{_fixed(value, 1)} s" if value > 0 else "ended"
    if kind == "fits":  # SLOTS x MEMORY_LIMIT and the server, within what it may use
        return "" if value else "with the server, over that"
    if kind == "bytes":
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{_fixed(value / size, 0)} {unit}"
        return f"{value} B"
    return str(value)


def _fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, halves away from zero as JavaScript's
    ``toFixed`` rounds them (Python's format rounds them to even)."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def _when(epoch: float | None) -> datetime.datetime | None:
    """``epoch`` in the current time zone, as the admin shows times (USE_TZ or not)."""
    if epoch is None:
        return None
    return timezone.localtime(datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC))


def _zone_name() -> str:
    """The current time zone as browsers' Intl names it: its IANA name, or a fixed offset
    as "+05:30" (Django names that "UTC+05:30", which Intl refuses)."""
    zone = timezone.get_current_timezone()
    if not isinstance(zone, datetime.timezone):
        return timezone.get_current_timezone_name()
    minutes = round(zone.utcoffset(None).total_seconds() / 60)
    sign, (hours, minutes) = "-" if minutes < 0 else "+", divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{minutes:02d}" if hours or minutes else "UTC"


def scope_sentence(data: dict[str, Any]) -> str:
    """Whose figures the page shows, in a sentence."""
    cluster = data["cluster"]
    if cluster is None:
        return (
            "Each worker process has its own pool, and every figure below is this process's "
            "(a REDIS setting makes the workers one pool)."
        )
    if data["scope"] == "cluster":
        return (
            "Its pool is coordinated in Redis with every process sharing the namespace: the "
            "load, jobs, counters, recent-job figures and chart below are cluster-wide; the "
            '"This process" column is this process\'s own.'
        )
    if cluster["mode"] == "redis":  # this reading failed; the pool judges the failure after
        failing = "did not answer this reading"
    else:
        failing = "refuses its writes" if cluster["trouble"] == "refused" else "is not answering"
    return (
        f"Its pool is coordinated in Redis, but Redis {failing}: every figure below "
        "is this process's."
    )


def work_state(data: dict[str, Any]) -> tuple[str, bool]:
    """What new work meets now, and whether it is refused; ``status.js`` has the same rules."""
    if data["closed"]:
        return "closed: accepting no new work", True
    if data["cluster"] is not None and data["cluster"]["mismatch"]:
        return f"refusing every job: {data['cluster']['mismatch']}", True
    if data["cluster"] is not None and data["cluster"]["mode"] == "refusing":
        return "refusing new work: Redis is failing", True
    if data["sandbox"]["refusing"]:
        return 'refusing extractions: sandbox below SANDBOX["REQUIRE"]', True
    cluster = data["cluster"]
    if cluster is not None and cluster["mode"] == "redis" and data["scope"] != "cluster":
        return "unsure: Redis did not answer this reading", True  # the pool judges it after
    return "accepting work", False


def status_context(data: dict[str, Any], dash: str = "—") -> dict[str, Any]:
    """Rows for ``admin/django_pdfpool/status.html``, each naming the JSON field it shows
    (``dash``: a figure there is none of); the command prints the same rows."""
    cluster_books = data["scope"] == "cluster"
    counters = []
    for label, field, meaning in COUNTERS:
        cells = [(f"counters.{field}", str(data["counters"][field]))]
        if cluster_books:
            if field in PROCESS_ONLY:  # no cluster-wide figure
                cells = [("", dash)]
                meaning += f"; each process counts it alone, never in Redis{SEE_OWN}"
            local = data["cluster"]["local"]["counters"][field]
            cells.append((f"cluster.local.counters.{field}", str(local)))
        row = {"label": label, "help": meaning, "cells": cells, "refused": "refused" in field}
        counters.append(row)
    gauges = []  # a bar for each field out of its limit, one tick per unit up to 32
    for label, field, of in (("Running", "running", "slots"), ("Queued", "queued", "queue")):
        value, limit = data[field], data[of]
        gauge = {"label": label, "field": field, "of": of, "value": value, "limit": limit}
        gauge["width"] = f"{min(100.0, 100.0 * value / limit) if limit else 0:.1f}"
        gauge["full"] = 0 < limit <= value  # no queue is never a full one
        gauge["ticks"] = [f"{100 * i / limit:.1f}" for i in range(1, limit)] if limit <= 32 else []
        gauges.append(gauge)
    jobs = []
    for job in data["jobs"]:
        running = fmt(job["running_for"], "seconds") if job["started_at"] else dash
        queued = fmt(job["queued_for"], "seconds")
        jobs.append({**job, "queued_for_text": queued, "running_for_text": running})
    door_held = []
    for held in data["door"]["held"]:
        left = fmt(max(0.0, held["left"]), "seconds")
        door_held.append({**held, "age_text": fmt(held["age"], "seconds"), "left_text": left})
    holds = [
        {**hold, "lease_text": fmt(hold["lease_left"], "lease")}
        for hold in (data["cluster"] or {}).get("processes", ())
    ]
    memory, none = data["memory"], ("", "", "")
    fits = ("memory.fits", "fits", fmt(memory["fits"], "fits"))  # refreshed as figures are
    envelope = [  # label, JSON field, format, and a note: its field ("": fixed), format, text
        ("May use", "allowed", "bytes", ("", "", f"({memory['allowed_by']})")),
        ("Slots x memory limit", "pool", "bytes", fits),
        ("Server RSS now", "server_rss", "bytes", none),
        ("Children RSS now", "children_rss", "bytes", none),
        ("Child processes now", "children", "int", none),
    ]
    return {
        "status": data,
        "zone": _zone_name(),  # status.js writes times in it (not time_zone: Django 6 sets it)
        "taken_at": _when(data["taken_at"]),
        "counted_since": _when(data["counted_since"]),
        "cluster_books": cluster_books,
        "scope_sentence": scope_sentence(data),
        "state": work_state(data),
        "config": [(label, field, kind, fmt(data[field], kind)) for label, field, kind in CONFIG],
        "gauges": gauges,
        "jobs": jobs,
        "counters": counters,
        "figure_columns": [label for label, _ in DURATIONS],
        "figures": [
            (label, [_figure(data, field, stat, kind, dash) for _, field in DURATIONS])
            for label, stat, kind in DURATION_ROWS
        ],
        "chart": chart(data),
        "chart_size": (CHART_W, CHART_H),
        "memory": {  # the envelope's rows, and the recent jobs' peaks, newest first
            "rows": [
                (label, f"memory.{f}", kind, fmt(memory[f], kind), note)
                for label, f, kind, note in envelope
            ],
            "jobs": [
                (_when(job["ended"]), fmt(job["peak_rss"], "bytes"), job["start"])
                for job in memory["recent_jobs"]
            ],
        },
        "door_held": door_held,
        "holds": holds,
    }


def _figure(data: dict[str, Any], field: str, stat: str, kind: str, dash: str) -> tuple[str, ...]:
    """A duration summary's ``stat``: its JSON field, format and text (``dash`` while no job)."""
    summary, path = data[field], f"{field}.{stat}"
    if kind == "int":
        return path, kind, str(summary[stat])
    return path, kind, fmt(summary[stat], "seconds") if summary["count"] else dash


def chart(data: dict[str, Any]) -> dict[str, Any]:
    """SVG paths of the recent history: running and queued stacked on a scale of
    slots + queue, and refusals per sample as bars on a scale of their peak."""
    history = data["history"]
    window, end = history["window"], data["taken_at"]
    capacity = max(1, data["slots"] + data["queue"])
    series = [history[name] for name in ("t", "running", "queued", "refused")]
    points = [
        (CHART_W * (1 - (end - t) / window), min(r, capacity), min(r + q, capacity), x)
        for t, r, q, x in zip(*series, strict=True)
        if end - t <= window
    ]
    peak = max((p[3] for p in points), default=0)
    bar = max(1.0, CHART_W * history["interval"] / window)

    def y(value: float, scale: float) -> str:
        return f"{CHART_H - CHART_H * value / scale:.1f}"

    running = queued = refused = ""
    if points:
        tops = " ".join(f"L{x:.1f},{y(t, capacity)}" for x, _, t, _ in points)
        mids = [f"L{x:.1f},{y(r, capacity)}" for x, r, _, _ in points]
        first, last = f"{points[0][0]:.1f}", f"{points[-1][0]:.1f}"
        running = f"M{first},{CHART_H} {' '.join(mids)} L{last},{CHART_H} Z"
        queued = f"M{first},{y(points[0][1], capacity)} {tops} {' '.join(reversed(mids))} Z"
        refused = " ".join(
            f"M{x - bar:.1f},{CHART_H} V{y(n, peak)} h{bar:.1f} V{CHART_H} Z"
            for x, _, _, n in points
            if n
        )
    return {
        "running": running,
        "queued": queued,
        "refused": refused,
        "peak": peak,
        "slots_y": y(data["slots"], capacity),
        "window": f"{window / 60:g} min" if window >= 60 else f"{window:g} s",
    }
