"""Child side: ``python -P -m django_pdfpool.sandbox.child_main [options]``: a cold child
imports its engines, says READY, does one job (child_job) and exits; with ``--template`` it
warms up and forks one such child per request instead (template_main)."""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import signal
import sys

from . import confine
from .child_job import die_with_parent, rehearse, serve_job, write_all
from .engines import preload
from .template_main import serve_template
from .wire import READY, SANDBOX_OFF, read_child_options

__all__ = ["main"]


def main(argv: list[str]) -> None:
    """Start up, then do one job, or serve forks as the template."""
    options = read_child_options(argv)
    os.nice(options.nice)  # added to the server's own; inherited by the template's forks
    if options.parent is not None:
        # A cold child dies at once with its parent (SIGKILL); the template gets SIGTERM,
        # so that it kills its own children first.
        die_with_parent(options.parent, signal.SIGTERM if options.template else signal.SIGKILL)
    engines = ("pypdf", *options.preload)
    for engine in engines:
        preload(engine)
    if options.warm_up or options.template:
        rehearse(engines, encrypted=options.template)
    gc.collect()
    gc.freeze()  # start-up objects are never collected: later collections skip them
    if options.sandbox != SANDBOX_OFF:  # once, for every child forked from here on
        confine.confine_process(confine.LEVELS[options.sandbox])
    if options.probe:
        report_layers()
    if options.template:
        serve_template(engines, *options.ready)
    write_all(sys.stdout.fileno(), READY)
    serve_job(0, 1)


def report_layers() -> None:
    """The layers a job's child gets on this host, as one JSON line on stdout; then exit."""
    confine.confine_job(sys.executable)
    applied = dataclasses.asdict(confine.applied())
    applied["layers"] = sorted(applied["layers"])
    write_all(sys.stdout.fileno(), json.dumps(applied).encode() + b"\n")
    sys.stdout.flush()
    raise SystemExit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
