"""The process's one pool: built from the PDFPOOL setting on first use, rebuilt (once idle)
when the setting changes, drained at exit; and the recorder of its recent history."""

from __future__ import annotations

import asyncio
import atexit
import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .admission.history import Recorder
from .admission.local import Pool
from .admission.protocol import AdmissionPool
from .bounds import LARGEST
from .conf import PoolSettings, get_settings
from .exceptions import ExtractionError
from .sandbox.extract import Extraction
from .sandbox.wire import ANSWER_OVERHEAD

logger = logging.getLogger("django_pdfpool")

_lock = threading.Lock()  # guards replacing _built
_built: tuple[AdmissionPool, PoolSettings] | None = None
"""The pool and the settings it was built from, read without the lock: one reference, so a
reader never pairs one pool with another's settings."""


def get_pool() -> AdmissionPool:
    """This process's pool, built from settings; after a settings change it is rebuilt
    once idle, so jobs in flight keep the limits they were admitted under."""
    global _built
    current = get_settings()
    built = _built
    if built is not None and (built[1] is current or built[1] == current):
        return built[0]
    with _lock:
        if _built is None:
            atexit.register(drain_pool)  # graceful by default where nothing else drains
        if _built is None or (_built[1] != current and _built[0].idle()):
            pool = _build(current)
            if _built is not None:
                _retire(_built[0])
            current.sandbox.configure(tmp_dir=current.temp_dir)
            _built = (pool, current)
            recorder.start()  # the status chart then covers the time before anyone looked
        return _built[0]


def _retire(pool: AdmissionPool) -> None:
    """Drain an idle Redis pool a settings change replaced before its successor runs a job:
    left beating, it keeps this process registered with the old terms, and the namespace's
    other pools, its successor included, are refused as misconfigured. A local pool is left
    open: a caller handed it just before is served, not refused ``closed``."""
    if not isinstance(pool, Pool):  # on a thread of its own (from async code too), waited for
        with ThreadPoolExecutor(1, "pdfpool-retire") as thread:
            thread.submit(asyncio.run, pool.drain())  # an error left unread: its lease lapses


def peek_pool() -> AdmissionPool | None:
    """This process's pool if one was built, without building one."""
    return _built[0] if _built is not None else None


recorder = Recorder(peek_pool)  # the pool's recent history, for the status page and metrics


def _build(conf: PoolSettings) -> AdmissionPool:
    """The pool the settings ask for: this process's own, or one coordinated in Redis."""
    common: dict[str, Any] = {"slots": conf.slots, "queue": conf.queue, "wait": conf.wait}
    common |= {"on_error": _log_job_error, "run_time_ceiling": conf.timeout}
    if conf.redis is None:
        return Pool(**common)
    from .admission.redis.redis_pool import MAX_RESULT_BYTES, RedisPool

    options = vars(conf.redis) | {  # REDIS's keys are RedisPool's options, but DEPLOYMENT
        "deployment": conf.deployment_tag(),  # two deployments on one namespace are refused
        "fingerprint": conf.results_tag,  # and so are processes whose results would differ
        # any Extraction MAX_TEXT_BYTES allows reaches other processes: JSON writes a text byte
        # in 6 at most (a control character), the rest is bounded as the child's answer is;
        # at most LARGEST, as integers are
        "max_result_bytes": min(
            max(MAX_RESULT_BYTES, 6 * conf.max_text_bytes + ANSWER_OVERHEAD), LARGEST
        ),
    }
    return RedisPool(**common, **options, encode=_encode_result, decode=_decode_result)


def _encode_result(value: Any) -> Any:
    """A job's result as JSON values, for sharers in other processes (Redis)."""
    if isinstance(value, Extraction):
        return {"extraction": value.as_dict(text=False)}  # the text is rebuilt from pages
    return {"value": value}


def _decode_result(value: Any) -> Any:
    return Extraction.from_dict(value["extraction"]) if "extraction" in value else value["value"]


def _log_job_error(key: str, error: BaseException) -> None:
    """Hostile or broken PDFs are everyday input; anything else is a fault."""
    if isinstance(error, ExtractionError):
        logger.info("extraction %s refused: %s (%s)", key, error.code, error.message)
    else:
        logger.error("PDF pool job %s failed", key, exc_info=error)


def drain_timeout() -> float:
    """How long a drain may take: a queued job may wait WAIT, then run TIMEOUT. With WAIT
    None it waits for the jobs ahead of it, run SLOTS at a time for TIMEOUT at most each."""
    conf = get_settings()
    wait = math.ceil(conf.queue / conf.slots) * conf.timeout if conf.wait is None else conf.wait
    return wait + conf.timeout + 5.0


async def adrain_pool(timeout: float | None = None) -> bool:
    """Drain this process's pool (stop accepting, finish the queue); after ``timeout``
    seconds stop it instead. True if everything finished in time."""
    pool = peek_pool()
    if pool is None:
        return True
    timeout = drain_timeout() if timeout is None else timeout
    if not pool.idle():  # a process that seems hung at exit says why, and for how long
        logger.warning("PDF pool: waiting at most %g s for the jobs in flight to end", timeout)
    try:
        await asyncio.wait_for(pool.drain(), timeout)
        return True
    except TimeoutError:
        left = not pool.idle()  # timeout 0 cancels even the drain of an idle pool
        if left:
            logger.warning("PDF pool drain timed out; stopping what is left")
        await pool.stop()
        return not left


def drain_pool(timeout: float | None = None) -> bool:
    """Synchronous ``adrain_pool`` (on a short-lived event loop of its own), for atexit and
    management commands; not in a signal handler, which may interrupt a thread holding the
    pool's lock (``close()`` is safe there)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(adrain_pool(timeout))
    raise RuntimeError("drain_pool() is for synchronous code: await adrain_pool() instead")
