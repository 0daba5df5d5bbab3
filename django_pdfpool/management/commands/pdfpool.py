"""``manage.py pdfpool status|drain|extract``: the pool's state, a drain of this process's
pool, and one PDF tried under the production limits (docs/command.md)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...bounds import seconds
from ...conf import PoolSettings, get_settings
from ...configured import drain_pool, drain_timeout, peek_pool
from ...exceptions import ExtractionError, Refused, UploadRejected
from ...pooled import extract_pooled
from ...sandbox.extract import configure as configure_extraction
from ...sandbox.wire import ENGINES
from ...status.metrics import own_snapshot
from ...status.page import fmt, status_data
from .. import extract_report as extracting
from .. import status_report

POOL_CALLER = "command:pdfpool"  # the caller of `extract --pool` unless --caller names one
EXIT_REFUSED = 3  # the command ran; the PDF was refused, or the drain ran out of time
NO_POOL_HERE = (
    "`manage.py pdfpool drain` runs in a process of its own, which has no pool: it cannot "
    "drain the pools of other processes (each worker's pool is in that worker's memory; "
    "with Redis, closing is per process too). Each worker drains its own at shutdown "
    "(PoolLifespan, or atexit); in a process that owns a pool, call "
    "call_command('pdfpool', 'drain') from its shutdown code. See docs/command.md."
)


class Command(BaseCommand):
    help = (
        "Operate the PDF pool: `status` reads it, `drain` drains this process's pool, "
        "`extract FILE` runs one PDF under the production limits."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        status = actions.add_parser(
            "status",
            help="The pool's state: this process's pool (backend local), or the cluster (redis).",
        )
        status.add_argument("--json", action="store_true", help="the status page's JSON")
        drain = actions.add_parser(
            "drain", help="Drain the pool of the process the command runs in (call_command only)."
        )
        drain.add_argument(
            "--timeout",
            type=float,
            help="seconds to wait before stopping what is left (default WAIT + TIMEOUT + 5)",
        )
        extract = actions.add_parser(
            "extract", help="Run one PDF through the sandbox under the settings' limits."
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
            "--caller",
            default=POOL_CALLER,
            help=f"with --pool: the caller the job runs as (default {POOL_CALLER!r})",
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
            status_report.check_redis(conf.redis)
        fresh = peek_pool() is None  # before status_data() builds it
        data = status_report.annotate(status_data(), fresh=fresh)
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
        else:
            self.stdout.write(status_report.status_text(data), ending="")

    def drain(self, conf: PoolSettings, options: dict[str, Any]) -> None:
        """Drain this process's pool, if it has one; CommandError where that cannot help."""
        pool = peek_pool()
        if pool is None:
            if getattr(self, "_called_from_command_line", False):  # Django's: manage.py
                raise CommandError(NO_POOL_HERE)
            self.stdout.write(f"No pool was built in process {os.getpid()}: nothing to drain.")
            return
        extracting.refuse_in_event_loop(
            "pdfpool drain blocks until the pool is drained: in async code, "
            "await django_pdfpool.adrain_pool() instead."
        )
        limit = drain_timeout() if options["timeout"] is None else options["timeout"]
        try:
            seconds(at_least=0).require("--timeout", limit)
        except ValueError as error:
            raise CommandError(str(error)) from None
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
        path, as_json = options["file"], options["json"]
        engine = options["engine"] or conf.engine
        size, shown = extracting.file_size(path), extracting.safe(path)
        heading, limits = (
            f"{shown} ({fmt(size, 'bytes')})",
            extracting.describe_limits(conf, engine),
        )
        try:
            if size > conf.max_upload_size:
                raise extracting.too_large(size, conf)
            if options["pool"]:
                if engine != conf.engine:
                    raise CommandError("--pool runs the pool's job, with the ENGINE setting.")
                result = extract_pooled(path, caller=options["caller"])
            else:
                progress = None
                if size >= extracting.PROGRESS_BYTES and not options["no_progress"]:
                    self.stderr.write(f"{heading}: extracting with {limits}")
                    timeout = fmt(conf.timeout, "seconds")

                    def progress(elapsed: float) -> None:
                        self.stderr.write(
                            f"{shown}: still extracting, {elapsed:.0f} s of {timeout} so far"
                        )

                configure_extraction(child_env=conf.sandbox.child_env)
                try:
                    result = extracting.run(path, conf, engine, progress)
                except (ImportError, ValueError) as error:  # an engine not installed, a bad limit
                    raise CommandError(str(error)) from None
        except ExtractionError as error:
            said, text = extracting.error_json(error), extracting.error_text(error)
        except (Refused, UploadRejected) as refusal:
            said = {"code": refusal.code, "message": str(refusal)}
            text = f"refused by the pool: {refusal.code}: {refusal}"
        else:
            if as_json:
                document = {"file": path, "size": size, "engine": engine, **result.as_dict()}
                self.stdout.write(json.dumps(document, indent=2))
            else:
                self.stdout.write(f"{heading}: {limits}")
                self.stdout.write(extracting.summary(result, full_text=options["text"]), ending="")
            return
        if as_json:
            self.stdout.write(json.dumps({"file": path, "error": said}))
        raise CommandError(f"{shown}: {text}", returncode=EXIT_REFUSED)
