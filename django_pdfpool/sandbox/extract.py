"""Parent side: `extract()` runs one job in a child and maps every ending to an `Extraction` or
an `ExtractionError` safe to show a user; the sandbox layers this host gives, and those required."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import importlib.util
import json
import logging
import math
import os
import queue
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, NoReturn

import django_pdfpool.sandbox.children as children
import django_pdfpool.sandbox.wire as wire

from .. import bounds as limits
from ..exceptions import ExtractionError, RunnerLost, SandboxUnavailable, Wording
from .confine import LAYERS, LEVELS, REQUIRE

PAGE_SEPARATOR = "\n\n"
"""Between two pages in ``Extraction.text``."""
_joining = threading.Lock()  # an Extraction's text is joined under it


class ReadOnlyDict(dict):  # type: ignore[type-arg]
    """A dict that refuses changes (an Extraction's metadata); ``dict(it)`` is a copy to change."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("an Extraction's metadata is read-only; change a copy: dict(metadata)")

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))


@dataclass(frozen=True)
class Extraction:
    """What a view gets: the text, page by page, and how much the child spent on it.
    Immutable, as every caller sharing the job gets this one object: `pages` is a tuple,
    `metadata` a read-only dict; `text` is joined on first use. JSON: `as_dict()`."""

    sha256: str  # of the file's bytes, hashed by the child over exactly what it parsed
    page_count: int  # pages in the document, even when truncated
    pages: tuple[str, ...]  # up to max_pages, and up to the page where the text cap cut
    metadata: Mapping[str, str]  # the /Info entries, keys without their leading slash
    truncated: bool  # not the whole text: stopped at max_pages, or cut at max_text_bytes
    elapsed: float  # seconds, measured in the child from job receipt to answer
    peak_rss: int  # bytes, the child's peak resident set
    text_truncated: bool = False  # cut at max_text_bytes (`truncated` is then True too)
    # How the child started ("forked" from the template, or "cold"): not in as_dict() nor ==.
    child_start: str = field(default=children.COLD, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pages", tuple(self.pages))
        object.__setattr__(self, "metadata", ReadOnlyDict(self.metadata))

    @property
    def text(self) -> str:
        """The pages joined with PAGE_SEPARATOR (built on first use, then kept): once, however
        many sharers ask at once (``cached_property`` no longer locks since Python 3.12)."""
        with _joining:
            joined: str = self.__dict__.get("text") or PAGE_SEPARATOR.join(self.pages)
            self.__dict__["text"] = joined
            return joined

    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # not the joined text

    def as_dict(self, *, text: bool = True) -> dict[str, Any]:
        """Plain JSON values: every field but child_start (pages a list, metadata a dict)
        and, unless `text=False`, the joined text."""
        result = {f.name: getattr(self, f.name) for f in fields(self) if f.compare}
        result.update(pages=list(self.pages), metadata=dict(self.metadata))
        return {**result, "text": self.text} if text else result

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Extraction:
        """The Extraction `as_dict()` described (its "text", derived, is not read)."""
        return cls(**{name: value for name, value in values.items() if name != "text"})


PROBE_TIMEOUT = 60.0  # seconds a probe child may take (an interpreter start on a busy host)
PROBE_RETRY = 10.0  # seconds a probe whose child failed (not a finding) is kept before another
PROBE_FAILED = "the probe child failed"
_logger = logging.getLogger("django_pdfpool.sandbox")


@dataclass(frozen=True)
class SandboxLayers:
    """The sandbox layers a job's child gets on this host, the level they reach (none <
    basic < landlock < full; docs/security.md) and the level required."""

    layers: tuple[str, ...]  # of confine.LAYERS
    missing: Mapping[str, str]  # layer -> why this host does not give it
    landlock_abi: int  # 0: no Landlock
    level: str  # the highest of confine.LEVELS the layers meet
    enabled: bool = True  # False: turned off (configure(sandbox=False)): no layer is put on
    required: str = "none"  # the level extractions are refused below

    @property
    def sufficient(self) -> bool:
        """Whether extractions may run: the layers meet the required level."""
        return set(LEVELS[self.required]) <= set(self.layers)

    @property
    def why(self) -> str:
        """The missing layers and their reasons, for the log."""
        return ", ".join(f"{k} ({v})" for k, v in sorted(self.missing.items()))


def _check_layers(found: SandboxLayers) -> None:
    """SandboxUnavailable (a fixed sentence for clients) unless `found` is sufficient;
    the operators' reason is logged at ERROR, once per finding."""
    if found.sufficient:
        return
    finding = (found.level, found.required, tuple(sorted(found.missing.items())))
    with _layers_lock:
        first = finding not in _logged
        _logged.add(finding)
    if first:
        _logger.error(
            "Extractions refused: the sandbox reaches level %r, PDFPOOL['SANDBOX']['REQUIRE'] "
            "is %r; missing: %s",
            found.level,
            found.required,
            found.why or "-",
        )
    raise SandboxUnavailable(Wording.SANDBOX)


def probe(python: str, env: tuple[str, ...], sandbox: str) -> SandboxLayers:
    """Start a probe child (`child_main --probe`): it puts on every layer, start-up's and a
    job's, and says which it got."""
    if sandbox == wire.SANDBOX_OFF:
        missing = dict.fromkeys(LAYERS, "the sandbox is turned off")
        return SandboxLayers((), missing, 0, "none", enabled=False)
    try:
        with children.stop_signals_blocked():  # as a job's child: a server's stop spares it
            proc = subprocess.Popen(
                [python, "-P", "-m", children.CHILD_MODULE, wire.PROBE_OPTION],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=children.child_env(env),
            )
        with proc:
            try:
                stdout = proc.communicate(timeout=PROBE_TIMEOUT)[0]
            finally:
                proc.kill()  # at the timeout (once it exited: nothing)
        found = json.loads(stdout.splitlines()[-1])
        layers = tuple(layer for layer in LAYERS if layer in found["layers"])
        missing = {str(k): str(v) for k, v in found["missing"].items() if k not in layers}
        abi = int(found["landlock_abi"])
    except (OSError, ValueError, KeyError, IndexError, TypeError, subprocess.SubprocessError):
        layers, missing, abi = (), dict.fromkeys(LAYERS, PROBE_FAILED), 0
    reached = [name for name, need in LEVELS.items() if set(need) <= set(layers)]
    return SandboxLayers(layers, missing, abi, reached[-1])


_template = children.Template()  # the process's template, forking warm children
_required = "none"  # the sandbox level below which extractions are refused
# By interpreter, env, sandbox: the probe's finding and until when it is kept (monotonic).
_found: dict[tuple[str, tuple[str, ...], str], tuple[SandboxLayers, float]] = {}
_logged: set[tuple[object, ...]] = set()  # the refusals' findings logged so far
_layers_lock = threading.Lock()
_tmp_dir: str | None = None
_UNSET: Any = object()
_registered: set[str] = set()  # engines registered by register_engine ("module:function")


def register_engine(engine: str) -> None:
    """Allow `engine` ("module:function": bytes in, a list of page texts out), which children
    import and call in place of pypdf: for tests and experiments; never a user's input."""
    module, colon, name = engine.partition(":")
    if not (colon and module and name.isidentifier()):
        raise ValueError("an engine is registered as 'module:function'")
    _registered.add(engine)


def sandbox_layers() -> SandboxLayers:
    """What the sandbox gives a job's child on this host, as a probe child found it (started
    once per process and configuration, about 0.1 s; again PROBE_RETRY s after one whose
    child failed, while the others go on with that one), and the level required."""
    key = (_template.python, _template.env, _template.sandbox)
    with _layers_lock:  # held by a first probe: nobody goes on without a finding
        kept, again = _found.get(key), False
        if kept is None:
            _found[key] = _kept(probe(*key))
        elif again := time.monotonic() >= kept[1]:  # one caller probes again, outside the lock
            _found[key] = kept[0], time.monotonic() + PROBE_TIMEOUT + PROBE_RETRY
    if again:
        _found[key] = _kept(probe(*key))
    found = _found[key][0]
    if (kept is None or (again and kept[0] != found)) and found.missing and found.enabled:
        _logger.warning("The extraction sandbox lacks on this host: %s", found.why)
    return replace(found, required=_required)


def _kept(found: SandboxLayers) -> tuple[SandboxLayers, float]:
    """A finding and until when it holds: for good, or PROBE_RETRY s if its child failed."""
    failed = PROBE_FAILED in found.missing.values()
    return found, time.monotonic() + PROBE_RETRY if failed else math.inf


def configure(
    *,
    warm: bool | None = None,
    tmp_dir: str | os.PathLike[str] | None = _UNSET,
    python: str | None = None,
    child_env: tuple[str, ...] | list[str] | None = None,
    sandbox: bool | None = None,
    require: str | None = None,
    nice: int | None = None,
) -> None:
    """Whether children fork from a warm template (False: a new interpreter per job), the
    directory for copies of byte sources (None: tempfile's), the children's interpreter, the
    environment variables they get besides `children.BASE_ENV`, whether they sandbox
    themselves (False: for tests of what the layers stop), the level (`confine.LEVELS`)
    below which `extract()` raises SandboxUnavailable, and their nice above ours (0-19)."""
    global _tmp_dir, _required
    if nice is not None:  # the arguments are checked before anything changes
        limits.NICE.require("nice", nice)
    if child_env is not None:
        limits.CHILD_ENV.require("child_env", child_env)
    if require is not None:
        REQUIRE.require("require", require)
        _required = require  # the last argument checked
    level = None
    if sandbox is not None or require is not None:
        enabled = _template.sandbox != wire.SANDBOX_OFF if sandbox is None else sandbox
        level = _required if enabled else wire.SANDBOX_OFF
    names = None if child_env is None else tuple(child_env)
    _template.configure(enabled=warm, python=python, env=names, sandbox=level, nice=nice)
    if tmp_dir is not _UNSET:
        _tmp_dir = None if tmp_dir is None else os.fspath(tmp_dir)


def prewarm() -> None:
    """Start the template now instead of at the first extraction."""
    _template.prewarm()


def shutdown() -> None:
    """End the template (also done at exit); `configure(warm=True)` has it start again."""
    _template.shutdown()


child_starts: Callable[[], children.ChildStarts] = _template.status  # forked and cold starts
idle_pids: Callable[[], list[int]] = _template.idle_pids  # the template and its ready children


async def extract(
    source: str | os.PathLike[str] | bytes,
    *,
    timeout: float,
    memory_limit: int,
    max_pages: int | None = None,
    engine: str = "pypdf",
    on_too_many_pages: Literal["truncate", "refuse"] = "truncate",
    warm: bool = True,
    max_text_bytes: int = wire.DEFAULT_MAX_TEXT_BYTES,
) -> Extraction:
    """The text of `source` (a path the caller keeps, or bytes), read in a child limited to
    `memory_limit` bytes and `timeout` seconds, cut to `max_text_bytes` of UTF-8 (then
    `truncated` and `text_truncated`); a PDF that fails raises ExtractionError, a job no
    child could take RunnerLost."""
    args = (timeout, memory_limit, max_pages, engine, on_too_many_pages, max_text_bytes)
    try:
        _checked(*args)  # the limits of the job before: no Python call
    except TypeError:  # an unhashable argument: its own error
        _check(*args)
    if _required != "none":  # probed once (but a failed probe): at once after that
        await asyncio.to_thread(lambda: _check_layers(sandbox_layers()))
    refuse = on_too_many_pages == "refuse"
    job = wire.ExtractionJob("", engine, timeout, memory_limit, max_pages, refuse, max_text_bytes)
    run = _Job(source, job, time.monotonic() + timeout, warm)
    _workers.run(run)
    try:
        answer, outcome = await asyncio.wrap_future(run.future)
    except asyncio.CancelledError:
        run.cancel()
        while not run.future.done():  # the thread reaps and removes the copy, however often
            with contextlib.suppress(Exception, asyncio.CancelledError):  # we are cancelled
                await asyncio.wrap_future(run.future)
        raise
    if isinstance(answer, wire.Extracted):  # the same fields, but how the child started
        return Extraction(**vars(answer), child_start=outcome.start)
    raise _ending_without_answer(outcome, engine) if answer is None else answer


def _check(
    timeout: float,
    memory_limit: int,
    max_pages: int | None,
    engine: str,
    on_too_many_pages: str,
    max_text_bytes: int,
) -> None:
    """ValueError for a bad argument, ImportError for an engine that is not installed."""
    limits.TIMEOUT.require("timeout", timeout)
    limits.MEMORY_LIMIT.require("memory_limit", memory_limit)
    limits.MAX_PAGES.require("max_pages", max_pages)
    if not (isinstance(engine, str) and engine in _registered):
        wire.ENGINE.require("engine", engine)
    limits.MAX_TEXT_BYTES.require("max_text_bytes", max_text_bytes)
    if on_too_many_pages not in ("truncate", "refuse"):
        raise ValueError("on_too_many_pages must be 'truncate' or 'refuse'")
    if engine == "pypdfium2" and importlib.util.find_spec("pypdfium2") is None:
        raise ImportError("engine 'pypdfium2' needs django-pdfpool[pdfium]")


# A tuple of arguments that passed is not checked again (typed: 1 and True are two keys).
_checked = functools.lru_cache(maxsize=64, typed=True)(_check)


class _Workers:
    """The threads holding jobs' conversations, kept `idle` seconds between jobs and started by
    a starter thread, off the caller's loop (``Thread.start()`` waits; docs/architecture.md)."""

    WORKING, IDLE = "pdfpool-extract", "pdfpool-idle"
    idle = 2.0

    def __init__(self) -> None:  # and again in a forked child
        self._lock = threading.Lock()
        self._waiting = 0  # threads waiting for a job on the queue
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._starts: queue.SimpleQueue[tuple[threading.Thread, _Job]] | None = None

    def run(self, job: _Job) -> None:
        """``job`` on a waiting thread, or on a new one."""
        with self._lock:
            if self._waiting:
                self._waiting -= 1
                self._queue.put(job)  # under the lock: a thread leaving sees it
                return
            if self._starts is None:  # once per process: this start waits, no other does
                self._starts = queue.SimpleQueue()
                starter = functools.partial(self._start, self._starts)
                threading.Thread(target=starter, daemon=True, name="pdfpool-starter").start()
            # In a list the thread empties: its args would keep the first job (its bytes) alive.
            thread = threading.Thread(
                target=self._serve, args=([job],), daemon=True, name=self.WORKING
            )
            self._starts.put((thread, job))

    @staticmethod
    def _start(starts: queue.SimpleQueue[tuple[threading.Thread, _Job]]) -> None:
        while True:
            thread, job = starts.get()
            try:
                thread.start()
            except BaseException as exc:  # no thread to be had: the job fails, nobody hangs
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(exc)
            del thread, job

    def _serve(self, first: list[_Job]) -> None:
        me, job = threading.current_thread(), first.pop()
        while True:
            me.name = self.WORKING
            job.run()
            del job
            me.name = self.IDLE
            with self._lock:
                self._waiting += 1
            while True:
                try:
                    job = self._queue.get(timeout=self.idle)
                    break
                except queue.Empty:
                    with self._lock:
                        if self._queue.empty():  # nobody counted on this thread: it leaves
                            self._waiting -= 1
                            return


_workers = _Workers()


def _after_fork() -> None:
    """In a forked process: locks of its own (a parent's thread may have held one, as a probe
    holds ``_layers_lock``), and no workers."""
    global _layers_lock
    _layers_lock = threading.Lock()
    _Workers.__init__(_workers)


os.register_at_fork(after_in_child=_after_fork)


class _Job:
    """One job's parent side, shared by the awaiting coroutine (which may cancel) and the
    worker thread holding the conversation with its child."""

    def __init__(self, source: Any, job: wire.ExtractionJob, deadline: float, warm: bool) -> None:
        self.source, self.job, self.deadline, self.warm = source, job, deadline, warm
        self.future: Future[tuple[wire.ChildAnswer | None, children.Outcome]] = Future()
        self._lock, self.cancelled = threading.Lock(), False
        self._child: children.Handle | None = None

    def run(self) -> None:
        """The worker thread: the job's file, a child, the conversation; the child reaped, a
        copy removed and the answer decoded (off the caller's loop) before they are handed on."""
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            path, owned = _job_file(self.source, self.job.memory_limit)
            try:
                line = wire.encode_job(replace(self.job, path=path))
                outcome = self._converse(line, wire.answer_limit(self.job.max_text_bytes))
            finally:
                if owned:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
            output, outcome.output = outcome.output, b""
            answer = None if self.cancelled else wire.decode_answer(output)  # empties a buffer
            del output  # nor does an error's traceback keep a buffer it did not empty
        except BaseException as exc:  # the source's fault, or a bug: its child is reaped
            self.future.set_exception(exc)
        else:
            self.future.set_result((answer, outcome))

    def _converse(self, job_line: bytes, max_output: int) -> children.Outcome:
        """A child takes the job (a second if the first was gone) and is reaped: one that has
        answered is ended at once, before the job's slot is freed."""
        outcome = children.Outcome(b"", None, lost=True)
        for _attempt in range(2):
            if self.cancelled:
                break
            try:
                child = _template.child(self.job.engine, self.deadline, self.warm)
            except OSError:  # no process to be had (EAGAIN, ENOMEM), nor time: the job is lost
                break
            with self._lock:
                self._child = child
                if self.cancelled:
                    child.kill()
            try:
                if not child.send(job_line):
                    children.drop(child)
                    continue
                outcome = child.receive(self.deadline, max_output)
            except BaseException:
                children.drop(child)
                raise
            if outcome.complete and not self.cancelled:
                children.drop(child, self.deadline)  # a stopped template holds no answer
                children.remember(child)
                return outcome
            child.finish(outcome, self.deadline)
            # Gone before it read the job (killed just now, or the deadline passed while a
            # template kept it waiting): no fault of the PDF's.
            outcome.lost = not (outcome.started or outcome.overflow)
            if outcome.started or outcome.timed_out or outcome.overflow:
                children.remember(child)
                break
        return outcome

    def cancel(self) -> None:
        """Kill the job's child (now, or as soon as it exists); its thread then reaps it."""
        with self._lock:
            self.cancelled = True
            if self._child is not None:
                self._child.kill()


def _job_file(source: Any, memory_limit: int) -> tuple[str, bool]:
    """The path the child reads and whether the job owns it (a copy of bytes it removes)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        # Its bytes, whatever the items' format (TypeError if they are not contiguous).
        with memoryview(source) as view, view.cast("B") as data:
            if len(data) > memory_limit:
                raise ExtractionError("too_large", detail="file larger than the memory limit")
            prefix = _copy_prefix(os.getpid())
            path = ""
            try:
                descriptor, path = tempfile.mkstemp(prefix=prefix, suffix=".pdf", dir=_tmp_dir)
                with os.fdopen(descriptor, "wb") as handle:
                    handle.write(data)
            except BaseException as error:
                if path:
                    os.unlink(path)
                if (refusal := no_room(error)) is None:
                    raise
                raise refusal from error
        return path, True
    path = os.path.abspath(os.fspath(source))
    info = os.stat(path)  # FileNotFoundError and friends are the caller's to handle
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("source must be a regular file")
    if info.st_size > memory_limit:
        raise ExtractionError("too_large", detail="file larger than the memory limit")
    return path, False


NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}  # a file system full, a quota, RLIMIT_FSIZE


def no_room(error: BaseException) -> RunnerLost | None:
    """For a copy of a PDF that found no room on disk, the host's refusal (503, to be tried
    again) that replaces `error`; None for any other error."""
    if not (isinstance(error, OSError) and error.errno in NO_ROOM):
        return None
    lost = RunnerLost(Wording.RUNNER_LOST)
    lost.add_note(f"no room for a copy of the PDF: {error}")
    return lost


@functools.cache
def _copy_prefix(pid: int) -> str:
    """``pdfpool-<pid>.<start time>-``, as ``uploads`` names a staged upload (which the sandbox
    may not import): a copy left by a process that ended is swept like one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:  # field 22; the name may hold ")"
            start = int(stat.read().rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):  # no /proc: 0, as uploads.started says
        start = 0
    return f"pdfpool-{pid}.{start}-"


# Fatal signals: pdfium answers a failed allocation under RLIMIT_AS with a deliberate crash,
# CPython with SIGABRT when it cannot recover from MemoryError; a SIGKILL we did not send
# comes from the kernel's OOM killer.
_TIME_SIGNALS = {signal.SIGXCPU, signal.SIGALRM}
_PDFIUM_MEMORY_SIGNALS = {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL,
                          signal.SIGTRAP}  # fmt: skip


_SIGNAL_NAMES = {number.value: number.name for number in signal.Signals}


def _ending_without_answer(outcome: children.Outcome, engine: str) -> Exception:
    """The error for a child that gave no valid answer: the deadline, overflow, its death, or
    no child at all (the host's fault, not the PDF's: 503, logged at ERROR)."""
    if outcome.lost:
        lost = RunnerLost(Wording.RUNNER_LOST)
        lost.add_note("no extraction child could take the job")
        return lost
    if outcome.timed_out:
        return ExtractionError("too_complex", detail="deadline")
    if outcome.overflow:
        return ExtractionError("too_large", detail="answer larger than allowed")
    returncode = outcome.returncode
    if returncode is None or returncode >= 0:
        return ExtractionError("crashed", detail=f"exit status {returncode}, no valid answer")
    number = -returncode
    name = _SIGNAL_NAMES.get(number, str(number))  # a real-time signal has no name
    pdfium = engine == "pypdfium2" and number in _PDFIUM_MEMORY_SIGNALS
    memory = number == signal.SIGKILL or pdfium
    code = "too_complex" if number in _TIME_SIGNALS else "too_large" if memory else "crashed"
    return ExtractionError(code, detail=name)
