"""Trace one upload through the example project: which django_pdfpool modules it enters,
how often control moves between them, and how often it reads its headers, resolves its
caller and reads the settings. A figure to watch while the per-request path is slimmed.

    python tools/trace_upload.py [--redis] [--json] [--no-digest] [--calls]

The example's own ASGI application (``demo.asgi:application``: the door, the lifespan,
the kept threads) is served by uvicorn in a thread of this process on 127.0.0.1 and a
free port; a warm-up upload of another PDF is sent first, untraced (imports, first-use
costs, threads started). Then ONE upload of a 4-page PDF is sent as the upload page's
script sends it (a multipart POST to ``/api/extract/`` with ``X-Requested-With`` and a
``Pdf-Digest``), with every thread profiled (``sys.setprofile`` and
``threading.setprofile``, installed before the example is imported) from just before the
request is sent until its 200 is read, the server's call for it has returned, the pool is
idle, the job loop has run everything queued before, and no counted call has come for
``QUIET`` seconds. ``--redis`` does the same with the Redis pool on a throwaway
redis-server, set through the example's own environment variables.

Definitions (also printed):

- A *call* is the first entry into a Python function whose module (its globals'
  ``__name__``) is ``django_pdfpool`` or below it: a profiler ``call`` event, for a
  coroutine or generator only its first one (an ``await``/``yield`` resumed is a
  *resumption*, counted apart). Comprehension and generator-expression bodies are left
  out; so are calls made by this tool's own thread and by the background timers in
  ``BACKGROUND`` (a call with one of them on its thread's stack) and ``BACKGROUND_THREADS``.
- A *module change* is a call whose module differs from the module of the call just
  before it, over the calls of every thread in the order the interpreter reported them
  (under the GIL they have one order); the first call is no change. Printed beside it:
  the same with resumptions taken as calls, and the sum over threads of each thread's
  own changes (which thread interleaving, different from run to run, does not move).
- ``COUNTED`` maps each figure to dotted names: a function's calls are counted (one
  resolution when one of its group's functions calls another); a cached accessor (no
  Python code of its own, ``functools.cache``) is counted by a stand-in put in place of
  every module-level reference to it during the trace, its cache misses by calls of the
  function it wraps. A name that does not resolve is reported "not found".
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dis
import functools
import hashlib
import http.client
import importlib
import itertools
import json
import os
import socket
import sys
import tempfile
import threading
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# --- what is counted: edit here -----------------------------------------------------------

COUNTED: dict[str, tuple[str, ...]] = {
    "headers parsed": ("django_pdfpool.record.UploadHeaders.of",),
    "caller resolved": (
        "django_pdfpool.callers.caller_of",
        "django_pdfpool.callers.acaller_of",
    ),
    "settings read": ("django_pdfpool.conf.get_settings",),
}
"""Figure -> the functions whose calls it counts (dotted: module, then attributes)."""

BACKGROUND: tuple[str, ...] = (
    # the status page's history sampler: a tick on the job loop, a sample in its executor
    "django_pdfpool.admission.history.Recorder._tick",
    "django_pdfpool.admission.history.Recorder._sample_logged",
    "django_pdfpool.admission.history.Recorder._after",
    # the metrics exporter's refreshing thread
    "django_pdfpool.status.collector.ProcessExporter._run",
    # the Redis pool's lease beat, its probe while Redis is down, its idle release
    "django_pdfpool.admission.redis.side.ProcessSide._beat_loop",
    "django_pdfpool.admission.redis.side.ProcessSide._watch",
    "django_pdfpool.admission.redis.side.ProcessSide._release_if_idle",
)
"""Periodic timers: a call with one of these on its thread's stack is not counted."""

BACKGROUND_THREADS: tuple[str, ...] = ("pdfpool-metrics",)
"""Threads (by name) whose calls are not counted."""

# ------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ROOT / "example_project"
sys.path.insert(0, str(ROOT))  # this checkout's django_pdfpool, tests.support
PACKAGE = "django_pdfpool"
UPLOAD_PATH = "/api/extract/"
QUIET = 0.3  # seconds without a counted call before the trace ends
PATIENCE = 60.0  # seconds an answer, or the end of the job, may take
TEMPLATE_PATIENCE = 10.0  # seconds the warm template may take to start
ANONYMOUS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})
GENERATOR_FLAGS = (
    0x20 | 0x80 | 0x200  # inspect.CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR
)


# --- resolving the table's names ----------------------------------------------------------


def resolve(dotted: str, *, load: bool = True) -> Any:
    """The object a dotted name names (the longest importable module, then attributes);
    None when it does not exist (renamed, removed). ``load=False``: modules imported
    already only."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if not load and module not in sys.modules:
            continue
        try:
            found: Any = importlib.import_module(module)
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute, None)
            if found is None:
                return None
        return found
    return None


def background() -> set[types.CodeType]:
    """The code of ``BACKGROUND``'s functions and of the functions and lambdas defined in
    them, in modules imported so far (a module not imported runs no timer)."""
    found: set[types.CodeType] = set()
    codes = [code_of(resolve(name, load=False)) for name in BACKGROUND]
    while codes:  # with the code nested in them: their lambdas and inner functions
        code = codes.pop()
        if code is not None and code not in found:
            found.add(code)
            codes += [const for const in code.co_consts if isinstance(const, types.CodeType)]
    return found


def code_of(found: Any) -> types.CodeType | None:
    """The Python code object behind a function, method, classmethod or staticmethod."""
    function = getattr(found, "__func__", found)
    code = getattr(function, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


@dataclass
class Target:
    """One name of ``COUNTED``: counted by its code's calls, or by a stand-in."""

    figure: str
    name: str
    found: Any = None
    code: types.CodeType | None = None  # counted by calls of this code
    wrapped: types.CodeType | None = None  # a cached accessor's function: its misses
    calls: int = 0
    nested: int = 0  # calls inside another call of the same figure: not counted
    misses: int = 0

    @property
    def exists(self) -> bool:
        return self.found is not None


def targets() -> list[Target]:
    made = []
    for figure, names in COUNTED.items():
        for name in names:
            target = Target(figure, name, resolve(name))
            if target.exists:
                target.code = code_of(target.found)
                if target.code is None:
                    target.wrapped = code_of(getattr(target.found, "__wrapped__", None))
            made.append(target)
    return made


class StandIn:
    """Counts the calls of a callable with no Python code of its own (a cache wrapper),
    then calls it; everything else is the original's."""

    def __init__(self, original: Any, on_call: Callable[[types.FrameType], None]) -> None:
        self._original = original
        self._on_call = on_call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._on_call(sys._getframe(1))
        return self._original(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)


@contextlib.contextmanager
def stand_ins(replacements: dict[int, StandIn]) -> Iterator[None]:
    """Put each stand-in in place of every module-level reference to its original
    (``replacements`` is keyed by the original's id); put them back afterwards."""
    done: list[tuple[types.ModuleType, str, Any]] = []
    try:
        for module in list(sys.modules.values()):
            names = getattr(module, "__dict__", None)
            if not isinstance(module, types.ModuleType) or names is None:
                continue
            for name, value in list(names.items()):
                stand_in = replacements.get(id(value))
                if stand_in is not None and value is stand_in._original:
                    setattr(module, name, stand_in)
                    done.append((module, name, value))
        yield
    finally:
        for module, name, value in done:
            setattr(module, name, value)


# --- the profiler ---------------------------------------------------------------------------


@dataclass
class Call:
    thread: str
    module: str
    function: str
    first: bool  # a first entry (else a coroutine's or generator's resumption)


@dataclass
class Tracer:
    """The profile function of every thread: records package calls while ``on``."""

    targets: list[Target]
    background: set[types.CodeType]
    tool_thread: int = field(default_factory=threading.get_ident)
    on: bool = False
    calls: list[Call] = field(default_factory=list)
    left_out: Counter[str] = field(default_factory=Counter)
    last_counted: float = 0.0
    _starts: dict[types.CodeType, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.watch(self.targets, self.background)

    def watch(self, targets: list[Target], background: set[types.CodeType]) -> None:
        """Count ``targets``; leave out calls made under ``background`` code."""
        self.targets, self.background = targets, background
        self._by_code = {t.code: t for t in targets if t.code is not None}
        self._misses = {t.wrapped: t for t in targets if t.wrapped is not None}
        self._groups: dict[str, set[types.CodeType]] = {}
        for target in targets:
            for code in (target.code, target.wrapped):
                if code is not None:
                    self._groups.setdefault(target.figure, set()).add(code)

    def profile(self, frame: types.FrameType, event: str, arg: object) -> None:
        if event != "call" or not self.on:
            return
        module = frame.f_globals.get("__name__")
        if not isinstance(module, str) or not (
            module == PACKAGE or module.startswith(PACKAGE + ".")
        ):
            return
        code = frame.f_code
        if code.co_name in ANONYMOUS:
            self.left_out["comprehension bodies"] += 1
            return
        first = self._first_entry(frame, code)
        reason = self._left_out_because(frame)
        if reason:
            self.left_out[reason] += 1
            return
        self.last_counted = time.monotonic()
        self.calls.append(Call(self._thread_name(), module, code.co_qualname, first))
        if not first:
            return
        target = self._by_code.get(code)
        if target is not None:
            self._count(target, frame)
        missed = self._misses.get(code)
        if missed is not None:
            missed.misses += 1

    def stand_in_called(self, target: Target, caller: types.FrameType) -> None:
        if self.on and not self._left_out_because(caller):
            self._count(target, caller, include=True)

    def _count(self, target: Target, frame: types.FrameType, include: bool = False) -> None:
        group = self._groups.get(target.figure, set())
        outer = frame if include else frame.f_back
        while outer is not None:
            if outer.f_code in group:
                target.nested += 1
                return
            outer = outer.f_back
        target.calls += 1

    def _first_entry(self, frame: types.FrameType, code: types.CodeType) -> bool:
        """A plain function's every call event; a coroutine's or generator's first one
        (its frame has not gone past its first RESUME)."""
        if not code.co_flags & GENERATOR_FLAGS:
            return True
        start = self._starts.get(code)
        if start is None:
            start = next((i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"), 0)
            self._starts[code] = start
        return frame.f_lasti <= start

    def _left_out_because(self, frame: types.FrameType) -> str | None:
        ident = threading.get_ident()
        if ident == self.tool_thread:
            return "this tool's thread"
        if self._thread_name() in BACKGROUND_THREADS:
            return "background threads"
        below: types.FrameType | None = frame
        while below is not None:
            if below.f_code in self.background:
                return "background timers"
            below = below.f_back
        return None

    @staticmethod
    def _thread_name() -> str:
        """The calling thread's name now (the extraction threads rename themselves)."""
        return threading.current_thread().name


# --- the example, served --------------------------------------------------------------------


def pdf(texts: list[str]) -> bytes:
    """A valid PDF, one page per text (the tests' own helper)."""
    from tests.support import pdfs

    return pdfs.simple(texts, title="trace_upload")


def form(pdf_bytes: bytes, name: str) -> tuple[bytes, str]:
    """A multipart form with the PDF as its ``file`` field, as a browser's FormData."""
    boundary = "----tracepdfpool" + hashlib.sha256(pdf_bytes).hexdigest()[:16]
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/pdf\r\n\r\n"
    ).encode()
    body = head + pdf_bytes + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def upload(port: int, pdf_bytes: bytes, name: str, digest: bool) -> tuple[int, bytes]:
    """POST the PDF as the upload page's script does; the status and the whole answer."""
    body, content_type = form(pdf_bytes, name)
    headers = {
        "Content-Type": content_type,
        "Accept": "application/json",
        "X-Requested-With": "fetch",
    }
    if digest:
        declared = base64.b64encode(hashlib.sha256(pdf_bytes).digest()).decode()
        headers["Pdf-Digest"] = f"sha-256=:{declared}:"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PATIENCE)
    try:
        connection.request("POST", UPLOAD_PATH, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class Served:
    """uvicorn serving the example's application in a thread of this process, as
    ``make demo`` does (lifespan on), on a socket bound to a free loopback port; it also
    tells when the server's call for an HTTP request has returned."""

    def __init__(self, application: Any) -> None:
        import uvicorn

        self.application = application
        self.returned = threading.Event()
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = int(self.socket.getsockname()[1])
        config = uvicorn.Config(
            self.app, interface="asgi3", lifespan="on", log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="uvicorn"
        )

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await self.application(scope, receive, send)
        finally:
            if scope["type"] == "http":
                self.returned.set()

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + PATIENCE
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(PATIENCE)
        self.socket.close()


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


def warm_template() -> bool | None:
    """Wait (a while) for the warm template to run, as on a server that has served before
    (the warm-up's job started it); whether it was ready (None: no template wanted)."""
    from django_pdfpool.sandbox.extract import child_starts

    deadline = time.monotonic() + TEMPLATE_PATIENCE
    while (starts := child_starts()).enabled:
        if starts.template_pid is not None:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return None


def warm_up_reaped() -> bool:
    """Whether the warm-up's forked job child is gone (reaped), so its end is not traced."""
    from django_pdfpool.sandbox import children

    with children._live_lock:
        return not any(isinstance(child, children.ForkedChild) for child in children._live)


def job_loop_done() -> None:
    """Return once the pool's job loop has run everything scheduled on it before now."""
    from django_pdfpool.admission import jobs

    loop = jobs._loop
    if loop is None:
        return
    ran = threading.Event()
    loop.call_soon_threadsafe(ran.set)
    if not ran.wait(PATIENCE):
        raise RuntimeError("the job loop did not answer")


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Figures:
    backend: str
    status: int
    warm_up_status: int
    digest_sent: bool
    warm_template: bool | None  # it ran when the upload was sent (None: WARM_CHILDREN off)
    modules: dict[str, int]  # module -> calls, in order of first entry
    calls: int
    module_changes: int
    resumptions: int
    module_changes_with_resumptions: int
    module_changes_within_threads: int
    counted: dict[str, dict[str, Any]]
    threads: dict[str, int]
    left_out: dict[str, int]
    sequence: list[str]  # every call, in order: "thread: module.function"

    def as_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "status": self.status,
            "warm_up_status": self.warm_up_status,
            "digest_sent": self.digest_sent,
            "warm_template": self.warm_template,
            "modules_entered": len(self.modules),
            "modules": self.modules,
            "calls": self.calls,
            "module_changes": self.module_changes,
            "resumptions": self.resumptions,
            "module_changes_with_resumptions": self.module_changes_with_resumptions,
            "module_changes_within_threads": self.module_changes_within_threads,
            "counted": self.counted,
            "threads": self.threads,
            "left_out": self.left_out,
            "sequence": self.sequence,
        }


def changes(modules: list[str]) -> int:
    """How many entries differ from the one just before."""
    return sum(1 for before, now in itertools.pairwise(modules) if before != now)


def figures_of(
    tracer: Tracer, backend: str, status: int, warm: int, digest: bool, template: bool | None
) -> Figures:
    firsts = [call for call in tracer.calls if call.first]
    modules: dict[str, int] = {}
    for call in firsts:
        modules[call.module] = modules.get(call.module, 0) + 1
    counted: dict[str, dict[str, Any]] = {}
    for target in tracer.targets:
        entry = counted.setdefault(target.figure, {"count": 0, "names": {}, "not_found": []})
        if not target.exists:
            entry["not_found"].append(target.name)
            continue
        entry["count"] += target.calls
        entry["names"][target.name] = target.calls
        if target.nested:
            entry["nested"] = entry.get("nested", 0) + target.nested
        if target.wrapped is not None:
            entry["cache_misses"] = entry.get("cache_misses", 0) + target.misses
    return Figures(
        backend=backend,
        status=status,
        warm_up_status=warm,
        digest_sent=digest,
        warm_template=template,
        modules=modules,
        calls=len(firsts),
        module_changes=changes([call.module for call in firsts]),
        resumptions=len(tracer.calls) - len(firsts),
        module_changes_with_resumptions=changes([call.module for call in tracer.calls]),
        module_changes_within_threads=sum(
            changes([call.module for call in firsts if call.thread == thread])
            for thread in {call.thread for call in firsts}
        ),
        counted=counted,
        threads=dict(Counter(call.thread for call in firsts).most_common()),
        left_out=dict(tracer.left_out),
        sequence=[f"{call.thread}: {call.module}.{call.function}" for call in firsts],
    )


@contextlib.contextmanager
def example_environment(redis_url: str | None) -> Iterator[None]:
    """The environment ``make demo`` (or, with ``redis_url``, ``make demo-cluster``) serves
    the example in, with its state in a temporary directory; restored afterwards."""
    saved = dict(os.environ)
    state = tempfile.mkdtemp(prefix="trace-upload-")
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = "demo.settings"
        os.environ["DEMO_STATE_DIR"] = state
        os.environ["PDFPOOL_BACKEND"] = "redis" if redis_url else ""
        os.environ["PDFPOOL_REDIS_URL"] = redis_url or ""
        sys.path.insert(0, str(PROJECT))  # as `make demo` runs in example_project/
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        import shutil

        shutil.rmtree(state, ignore_errors=True)


@contextlib.contextmanager
def redis_server(wanted: bool) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    from tests.support.redis_server import RedisServer, available

    if not available():
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")
    with RedisServer() as server:
        yield server.url


def trace(*, use_redis: bool = False, digest: bool = True) -> Figures:
    """Serve the example, warm it up, then trace one upload (see the module's docstring)."""
    tracer = Tracer(targets=[], background=set())
    # every thread started from here on is profiled (the job loop's, the kept threads, ...)
    threading.setprofile(tracer.profile)
    sys.setprofile(tracer.profile)
    os.register_at_fork(after_in_child=lambda: sys.setprofile(None))
    try:
        with redis_server(use_redis) as url, example_environment(url):
            application = importlib.import_module("demo.asgi").application  # `make demo`'s
            with Served(application) as served:
                warm, _ = upload(served.port, pdf(["warm", "up", "first", "page"]), "w.pdf", digest)
                template = warm_template()
                wait_for(warm_up_reaped, "the warm-up's child to be reaped")
                tracer.watch(targets(), background())
                replacements = {
                    id(t.found): StandIn(t.found, functools.partial(tracer.stand_in_called, t))
                    for t in tracer.targets
                    if t.exists and t.code is None
                }
                traced = pdf(["one", "two", "three", "four"])
                from django_pdfpool.configured import peek_pool

                with stand_ins(replacements):
                    served.returned.clear()
                    tracer.on = True
                    status, answer = upload(served.port, traced, "traced.pdf", digest)
                    wait_for(served.returned.is_set, "the server's call to return")
                    pool = peek_pool()
                    wait_for(lambda: pool is None or pool.idle(), "the pool to be idle")
                    job_loop_done()
                    wait_for(lambda: time.monotonic() - tracer.last_counted > QUIET, "quiet")
                    tracer.on = False
                if status != 200:
                    raise AssertionError(f"the traced upload got {status}: {answer[:300]!r}")
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    backend = "redis" if use_redis else "local"
    return figures_of(tracer, backend, status, warm, digest, template)


# --- the output -------------------------------------------------------------------------------

DEFINITIONS = """\
call: the first entry into a Python function of django_pdfpool.* (a coroutine's or
  generator's resumption is not a call; comprehension bodies, this tool's thread and the
  background timers are left out); every thread, from just before the request is sent
  until the answer is read and the job's delivery is done.
module change: a call whose module differs from the module of the call just before it,
  over every thread's calls in the order the interpreter reported them (how threads
  interleave moves it by a few from run to run; the figure per thread does not)."""


def report(figures: Figures, *, calls: bool = False) -> str:
    lines = [
        f"One upload of a 4-page PDF to {UPLOAD_PATH} (the example project, {figures.backend}"
        f" pool, Pdf-Digest {'sent' if figures.digest_sent else 'not sent'}): "
        f"HTTP {figures.status}",
        f"after an untraced warm-up upload of another PDF (HTTP {figures.warm_up_status}),"
        " so that imports and first-use costs are left out;",
        "the warm template "
        + {True: "was running", False: "was NOT running in time", None: "is off"}[
            figures.warm_template
        ]
        + ".",
        "",
        f"modules entered: {len(figures.modules)} ({figures.calls} calls), in order of"
        " first entry:",
    ]
    lines += [f"  {calls:5d}  {module}" for module, calls in figures.modules.items()]
    lines += [
        "",
        f"module changes: {figures.module_changes}",
        f"  with the {figures.resumptions} resumptions taken as calls:"
        f" {figures.module_changes_with_resumptions}",
        f"  each thread's calls apart (no interleaving), summed:"
        f" {figures.module_changes_within_threads}",
        "",
    ]
    for figure, entry in figures.counted.items():
        parts = [f"{'.'.join(name.split('.')[-2:])} {n}" for name, n in entry["names"].items()]
        extra = [f"cache misses {entry['cache_misses']}"] if "cache_misses" in entry else []
        extra += [f"{entry['nested']} nested, not counted"] if entry.get("nested") else []
        extra += [f"not found: {name}" for name in entry["not_found"]]
        detail = ", ".join(parts + extra)
        lines.append(f"{figure}: {entry['count']}" + (f"  ({detail})" if detail else ""))
    lines += ["", "calls by thread:"]
    lines += [f"  {calls:5d}  {thread}" for thread, calls in figures.threads.items()]
    if figures.left_out:
        left = ", ".join(f"{why} {n}" for why, n in sorted(figures.left_out.items()))
        lines += ["", f"left out (call events): {left}"]
    if calls:
        lines += ["", "the calls, in order:"] + [f"  {each}" for each in figures.sequence]
    lines += ["", DEFINITIONS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--redis", action="store_true", help="the Redis pool (a throwaway server)")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.add_argument("--no-digest", action="store_true", help="send no Pdf-Digest header")
    parser.add_argument("--calls", action="store_true", help="list every call, in order")
    options = parser.parse_args(argv)
    figures = trace(use_redis=options.redis, digest=not options.no_digest)
    if options.json:
        print(json.dumps(figures.as_json(), indent=2))
    else:
        print(report(figures, calls=options.calls))
    return 0 if figures.status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
