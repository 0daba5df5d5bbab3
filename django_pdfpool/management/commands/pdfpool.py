"""``manage.py pdfpool status|drain|extract``: the pool's state, a drain of this process's
pool, and one PDF tried under the production limits, its outcome as text (docs/command.md)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import re
import stat
import textwrap
import time
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, BinaryIO

from django.core.exceptions import ImproperlyConfigured
from django.core.files import File
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...bounds import seconds
from ...conf import PoolSettings, RedisSettings, get_settings
from ...configured import drain_pool, drain_timeout, peek_pool
from ...exceptions import ExtractionError, Refused, UploadRejected, UploadTooLarge
from ...pooled import extract_pooled
from ...sandbox.extract import Extraction
from ...sandbox.extract import extract as extract_file
from ...sandbox.wire import ENGINES
from ...status.metrics import own_snapshot
from ...status.page import (
    SEE_OWN,
    fmt,
    scope_sentence,
    status_context,
    status_data,
    work_state,
)

POOL_CALLER = "command:pdfpool"  # the caller of `extract --pool` unless --caller names one
EXIT_USAGE = 2  # a wrong argument, as Django's parser exits
EXIT_REFUSED = 3  # the command ran; the PDF (status: every job) was refused, or the drain timed out
NO_POOL_HERE = (
    "`manage.py pdfpool drain` runs in a process of its own, which has no pool: it cannot "
    "drain the pools of other processes (each worker's pool is in that worker's memory; "
    "with Redis, closing is per process too). Each worker drains its own at shutdown "
    "(PoolLifespan, or atexit); in a process that owns a pool, call "
    "call_command('pdfpool', 'drain') from its shutdown code. See docs/command.md."
)
PROGRESS_BYTES = 1 << 20  # files at least this large get progress lines on stderr
PROGRESS_EVERY = 1.0  # seconds between progress lines
PREVIEW_CHARS = 600  # of the text, shown without --text
ERROR_FIELDS = ("code", "message", "detail", "elapsed", "peak_rss")  # of ExtractionError, as JSON
FRESH_NOTES = {  # by backend: the command built its pool just now, nothing ran in it
    "local": " That is this command's process, whose pool was built just now: it is empty by "
    "construction, whatever the workers are doing.",
    "redis": " That is this command's process, which ran no job: they are left out.",
}
JOB_COLUMNS = ("STATE", "JOB", "CALLER", "SHARERS", "QUEUED FOR", "RUNNING FOR")
JOB_CELLS = itemgetter(
    "state", "short_key", "caller", "sharers", "queued_for_text", "running_for_text"
)

# Control characters (category Cc), and the bidirectional marks, embeddings, overrides and
# isolates that reorder what a terminal shows (CVE-2021-42574)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe(text: str, *, keep: str = "") -> str:
    """``text`` with control characters (but those in ``keep``) and bidirectional controls
    escaped: what a hostile PDF, or a caller's name, says must not drive the terminal."""
    return _UNSAFE.sub(
        lambda m: m[0] if m[0] in keep else m[0].encode("unicode_escape").decode(), text
    )


def check_redis(conf: RedisSettings) -> None:
    """CommandError unless the pool's Redis (through its Sentinels, if set) answers a PING: a
    pool that cannot reach Redis reads its own process instead, which would pass for an idle
    cluster."""
    import redis

    from ...admission.redis.link import connect
    from ...admission.redis.urls import presentable

    client = connect(conf.url, conf.sentinels, conf.timeout)
    try:
        with client:
            client.ping()
    except redis.RedisError as error:
        raise CommandError(
            f"Redis at {presentable(conf.url)} does not answer ({type(error).__name__}): "
            "the cluster's state cannot be read."
        ) from None


def annotate(data: dict[str, Any], *, fresh: bool) -> dict[str, Any]:
    """``status_data()`` with ``fresh`` (the command built the pool: nothing ran in it) and
    the status page's ``note`` saying whose figures these are."""
    note = scope_sentence(data)
    if fresh and data["scope"] != "cluster":
        note += FRESH_NOTES[data["backend"]]
    return {**data, "fresh": fresh, "note": note}


def status_text(data: dict[str, Any]) -> str:
    """The annotated reading as plain text: a heading, the note, then tables, from the rows
    of the status page."""
    rows, cluster, sandbox = status_context(data, dash="-"), data["cluster"], data["sandbox"]
    if cluster is None:
        title = f"PDF pool of process {data['pid']} on {data['host']} (backend local)"
    else:
        title = (
            f"PDF pool in Redis: namespace {cluster['namespace']} at {cluster['url']}, "
            f"mode {cluster['mode']}, read by process {data['pid']} on {data['host']}"
        )
    pool = [
        ("Running", f"{data['running']} of {data['slots']} slots"),
        ("Queued", f"{data['queued']} of {data['queue']} places"),
        ("State", work_state(data)[0]),
    ]
    jobs = [
        JOB_CELLS({**job, "caller": job["caller_name"] or job["caller"]}) for job in rows["jobs"]
    ]
    blocks = [
        [safe(title), "", *textwrap.wrap(data["note"], 92)],
        _table(["SETTING", "VALUE"], [(label, text) for label, _, _, text in rows["config"]]),
        _table(["POOL", "NOW"], pool),
        _listing("Jobs in flight", JOB_COLUMNS, jobs),
    ]
    if cluster is not None and cluster["mode"] == "redis":
        held = itemgetter("process", "pid", "lease_text")
        holds = [
            (*held(h), len(h["running"]), len(h["queued"]), h["waiting"]) for h in rows["holds"]
        ]
        header = ["PROCESS", "PID", "LEASE LEFT", "RUNNING", "QUEUED", "WAITING"]
        blocks.append(_listing("Processes holding or waiting on something", header, holds))
    refusing = " (not met: extractions are refused)" if sandbox["refusing"] else ""
    memory = rows["memory"]
    envelope = [(label, text, note[2]) for label, _, _, text, note in memory["rows"]]
    peaks = [(f"{ended:%H:%M:%S}", peak, start) for ended, peak, start in memory["jobs"]]
    blocks += [
        [
            f"Extraction sandbox on this host: level {sandbox['level']}, required "
            f"{sandbox['required']}{refusing}, Landlock ABI {sandbox['landlock_abi']}.",
            *_table(["LAYER", "STATE"], list(sandbox["layers"].items())),
        ],
        [f"Memory envelope of process {data['pid']}:", *_table(["", "VALUE", ""], envelope)],
        _listing("Recent jobs' peak RSS", ["ENDED", "PEAK RSS", "CHILD"], peaks),
    ]
    if not data["fresh"] or data["scope"] == "cluster":
        whose = "the cluster" if data["scope"] == "cluster" else f"process {data['pid']}"
        counters = [  # the page's first column, its help without the pointer to the second
            (row["label"], row["cells"][0][1], row["help"].removesuffix(SEE_OWN))
            for row in rows["counters"]
        ]
        blocks.append([f"Counters of {whose}:", *_table(["EVENT", "COUNT", "WHAT"], counters)])
        columns = ["", *(label.upper() for label in rows["figure_columns"])]
        figures = [(label, *(text for _, _, text in cells)) for label, cells in rows["figures"]]
        blocks.append([f"Recent jobs of {whose}:", *_table(columns, figures)])
    return safe("\n\n".join("\n".join(block) for block in blocks), keep="\n") + "\n"


def _listing(name: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """``name (n):`` over a table of the rows, or ``name: none.``"""
    return [f"{name} ({len(rows)}):", *_table(header, rows)] if rows else [f"{name}: none."]


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """Left-aligned columns two spaces apart, under a header row."""
    cells = [[safe(str(cell)) for cell in row] for row in [header, *rows]]  # one line each
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(map(str.ljust, row, widths)).rstrip() for row in cells]


def open_file(path: str) -> BinaryIO:
    """The regular file at ``path``, opened by this process: what it may read, not what a
    sandboxed child may (root's access is not the child's); CommandError for anything else."""
    try:
        file = open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb")  # noqa: SIM115
    except OSError as error:
        raise CommandError(f"Cannot read {safe(path)}: {error.strerror}.") from None
    if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):  # a FIFO would hang, a device too
        file.close()
        raise CommandError(f"{safe(path)} is not a regular file.")
    return file


def refuse_in_event_loop(message: str) -> None:
    """CommandError(``message``) when called from async code, whose loop it would block."""
    with contextlib.suppress(RuntimeError):  # no running loop
        asyncio.get_running_loop()
        raise CommandError(message)


def run(
    path: str, data: bytes, conf: PoolSettings, engine: str, say: Callable[[str], None] | None
) -> Extraction:
    """Extract ``data`` (the file at ``path``) in a cold child (no template left behind) under
    the settings' limits, telling ``say`` every ``PROGRESS_EVERY`` seconds while it runs;
    raises ExtractionError."""
    refuse_in_event_loop("pdfpool extract runs its own event loop: call it from synchronous code.")
    terms = conf.job_terms | {"engine": engine}
    conf.sandbox.configure()  # its layers, required level and environment, as uploads have

    async def extracting() -> Extraction:
        start = time.monotonic()
        task = asyncio.ensure_future(extract_file(data, warm=False, **terms))
        while say and not (await asyncio.wait({task}, timeout=PROGRESS_EVERY))[0]:
            took, timeout = time.monotonic() - start, fmt(conf.timeout, "seconds")
            say(f"{safe(path)}: still extracting, {took:.0f} s of {timeout} so far")
        return await task  # interrupted (Ctrl-C): asyncio.run cancels it, the child is reaped

    return asyncio.run(extracting())


def error_text(error: ExtractionError) -> str:
    """One line: the code, the message a user would see, and what the child reported."""
    figures = [f"detail: {safe(error.detail)}"] if error.detail else []
    if error.elapsed is not None:
        figures.append(f"elapsed {fmt(error.elapsed, 'seconds')}")
    if error.peak_rss is not None:
        figures.append(f"peak RSS {fmt(error.peak_rss, 'bytes')}")
    return f"{error} ({'; '.join(figures)})" if figures else str(error)


def summary(result: Extraction, *, full_text: bool) -> str:
    """The outcome as text: figures, metadata, and the text (a preview unless full)."""
    cut = "yes, at the page limit (MAX_PAGES)" if result.truncated else "no"
    if result.text_truncated:
        cut = "yes, at the text limit (MAX_TEXT_BYTES)"
    rows = [
        ("sha256", result.sha256),
        ("pages", f"{result.page_count} in the document, {len(result.pages)} extracted"),
        ("truncated", cut),
        ("text", f"{len(result.text)} characters"),
        ("elapsed", f"{fmt(result.elapsed, 'seconds')} in the child"),
        ("peak RSS", fmt(result.peak_rss, "bytes")),
    ]
    rows += [(f"meta {safe(key)}", safe(value)) for key, value in sorted(result.metadata.items())]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label.ljust(width)}  {value}" for label, value in rows]
    text = result.text if full_text else result.text[:PREVIEW_CHARS]
    cut_at = f", first {PREVIEW_CHARS} characters (--text for all)" if text != result.text else ""
    return "\n".join([*lines, f"--- text{cut_at} ---", safe(text, keep="\n\t"), ""])


def shared_options(parser: CommandParser) -> CommandParser:
    """Django's options of every command (``--settings``, ``-v``, ``--traceback``...) for the
    subcommands, as they follow any command's arguments; without defaults, so that one given
    before the ACTION stands."""
    shared = CommandParser(add_help=False)
    for action in parser._actions:
        if action.option_strings and action.dest not in ("help", "version"):
            shared._add_action(copy.copy(action)).default = argparse.SUPPRESS
    return shared


class Command(BaseCommand):
    help = (
        "Operate the PDF pool: `status` reads it, `drain` drains this process's pool, "
        "`extract FILE` runs one PDF under the production limits."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        django_options = [shared_options(parser)]  # --settings, -v...: after ACTION too
        status = actions.add_parser(
            "status",
            parents=django_options,
            help="The pool's state: this process's pool (backend local), or the cluster (redis).",
        )
        status.add_argument("--json", action="store_true", help="the status page's JSON")
        drain = actions.add_parser(
            "drain",
            parents=django_options,
            help="Drain the pool of the process the command runs in (call_command only).",
        )
        drain.add_argument(
            "--timeout",
            type=float,
            help="seconds to wait before stopping what is left (default WAIT + TIMEOUT + 5; "
            "WAIT None: ceil(QUEUE / SLOTS) x TIMEOUT)",
        )
        extract = actions.add_parser(
            "extract",
            parents=django_options,
            help="Run one PDF through the sandbox under the settings' limits.",
        )
        extract.add_argument("file", help="the PDF to read")
        extract.add_argument("--engine", choices=ENGINES, help="instead of the ENGINE setting")
        extract.add_argument("--json", action="store_true", help="the outcome as JSON")
        extract.add_argument("--text", action="store_true", help="all the text, not a preview")
        extract.add_argument(
            "--no-progress", action="store_true", help="no progress lines for large files"
        )
        extract.add_argument(
            "--pool",
            action="store_true",
            help="through this process's pool (with REDIS set: the cluster's), as an "
            "upload of the same file would run: its limits, its single-flight key",
        )
        extract.add_argument(
            "--caller", help=f"with --pool: the caller the job runs as (default {POOL_CALLER!r})"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            conf = get_settings()
        except ImproperlyConfigured as error:
            raise CommandError(f"The PDFPOOL setting is invalid: {error}") from None
        getattr(self, options["action"])(conf, options)

    def status(self, conf: PoolSettings, options: dict[str, Any]) -> None:
        """One reading, saying whose figures they are."""
        if conf.redis is not None:
            check_redis(conf.redis)
        fresh = peek_pool() is None  # before status_data() builds it
        data = annotate(status_data(), fresh=fresh)
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
        else:
            self.stdout.write(status_text(data), ending="")
        if data["cluster"] is not None and data["cluster"]["mismatch"]:  # as extract --pool
            raise CommandError(data["cluster"]["mismatch"], returncode=EXIT_REFUSED)

    def drain(self, conf: PoolSettings, options: dict[str, Any]) -> None:
        """Drain this process's pool, if it has one; CommandError where that cannot help."""
        pool = peek_pool()
        if pool is None:
            if getattr(self, "_called_from_command_line", False):  # Django's: manage.py
                raise CommandError(NO_POOL_HERE)
            self.stdout.write(f"No pool was built in process {os.getpid()}: nothing to drain.")
            return
        refuse_in_event_loop(
            "pdfpool drain blocks until the pool is drained: in async code, "
            "await django_pdfpool.adrain_pool() instead."
        )
        limit = options["timeout"]
        if limit is None:  # from valid settings; with WAIT None it may exceed the option's bound
            limit = drain_timeout()
        else:
            try:
                seconds(at_least=0).require("--timeout", limit)
            except ValueError as error:
                raise CommandError(str(error), returncode=EXIT_USAGE) from None
        mine = own_snapshot(pool)
        self.stdout.write(
            f"Draining the pool of process {os.getpid()}: it accepts no new work; "
            f"{mine.running} running and {mine.queued} queued jobs get up to "
            f"{fmt(limit, 'seconds')} to finish."
        )
        began = time.monotonic()
        if not drain_pool(limit):
            raise CommandError(
                f"The drain ran out of time after {fmt(limit, 'seconds')}: the jobs left were "
                "stopped (running ones cancelled, their callers refused).",
                returncode=EXIT_REFUSED,
            )
        took = fmt(time.monotonic() - began, "seconds")
        self.stdout.write(f"Drained in {took}: every job finished. The pool accepts no new work.")

    def extract(self, conf: PoolSettings, options: dict[str, Any]) -> None:
        """One PDF under the production limits: its outcome, or its error code (exit 3)."""
        path, as_json, caller = options["file"], options["json"], options["caller"]
        if caller is not None and not options["pool"]:
            raise CommandError("--caller goes with --pool.", returncode=EXIT_USAGE)
        engine = options["engine"] or conf.engine
        if options["pool"]:
            if engine != conf.engine:
                raise CommandError(
                    "--pool runs the pool's job, with the ENGINE setting.", returncode=EXIT_USAGE
                )
            caller = POOL_CALLER if caller is None else caller
            if not isinstance(caller, str) or not caller:
                raise CommandError("--caller must name a caller.", returncode=EXIT_USAGE)
        file = open_file(path)
        size, shown = os.fstat(file.fileno()).st_size, safe(path)
        heading = f"{shown} ({fmt(size, 'bytes')})"
        limits = (
            f"engine {engine}, timeout {fmt(conf.timeout, 'seconds')}, memory limit "
            f"{fmt(conf.memory_limit, 'bytes')}, pages {conf.max_pages or 'all'}, text "
            f"{fmt(conf.max_text_bytes, 'bytes')}, upload {fmt(conf.max_upload_size, 'bytes')}"
        )
        try:
            with file:
                if size > conf.max_upload_size:  # as the decorator answers it (413), before work
                    raise ExtractionError(
                        "too_large",
                        str(UploadTooLarge.over(conf.max_upload_size)),
                        detail=f"{size} bytes, over MAX_UPLOAD_SIZE ({conf.max_upload_size} bytes)",
                    )
                if options["pool"]:
                    result = extract_pooled(File(file, path), caller=caller)
                else:
                    loud = size >= PROGRESS_BYTES and not options["no_progress"]
                    if loud:
                        self.stderr.write(f"{heading}: extracting with {limits}")
                    say = self.stderr.write if loud else None
                    try:
                        data = file.read(conf.memory_limit + 1)  # past it: too_large, as ever
                        result = run(path, data, conf, engine, say)
                    except (ImportError, ValueError) as error:  # an engine missing, a bad limit
                        raise CommandError(str(error)) from None
        except ExtractionError as error:
            said = {field: getattr(error, field) for field in ERROR_FIELDS}
            text = error_text(error)
        except (Refused, UploadRejected) as refusal:
            said = {"code": refusal.code, "message": str(refusal)}
            text = f"refused by the pool: {refusal.code}: {refusal}"
        else:
            if as_json:
                document = {"file": path, "size": size, "engine": engine, **result.as_dict()}
                self.stdout.write(json.dumps(document, indent=2))
            else:
                self.stdout.write(f"{heading}: {limits}")
                self.stdout.write(summary(result, full_text=options["text"]), ending="")
            return
        if as_json:
            self.stdout.write(json.dumps({"file": path, "error": said}))
        raise CommandError(f"{shown}: {text}", returncode=EXIT_REFUSED)
