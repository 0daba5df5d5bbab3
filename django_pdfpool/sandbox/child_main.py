"""Child side: ``python -P -m django_pdfpool.sandbox.child_main [options]``.

A cold child imports its engines, says READY, then does one job (child_job) and exits; with
``--template`` it warms up and forks one such child per request instead (template_main).
"""

from __future__ import annotations

import gc
import signal
import sys

from .child_job import die_with_parent, limit_self, rehearse, run_job, serve_job, write_all
from .engines import preload
from .template_main import serve_template
from .wire import READY, read_child_options

__all__ = ["limit_self", "main", "run_job"]  # run_job: benchmarks/variants.py calls it


def main(argv: list[str]) -> None:
    """Start up, then do one job, or serve forks as the template."""
    options = read_child_options(argv)
    if options.parent is not None:
        # A cold child dies at once with its parent (SIGKILL); the template gets SIGTERM,
        # so that it kills its own children first.
        die_with_parent(options.parent, signal.SIGTERM if options.template else signal.SIGKILL)
    engines = ("pypdf", *options.preload)
    for engine in engines:
        preload(engine)
    if options.warm_up or options.template:
        rehearse(engines)
    gc.collect()
    gc.freeze()  # start-up objects are never collected: later collections skip them
    if options.template:
        serve_template(engines, *options.ready)
    write_all(sys.stdout.fileno(), READY)
    serve_job(0, 1)


if __name__ == "__main__":
    main(sys.argv[1:])
