"""A worker process for the cross-process tests, and the test side's handle on it.

``python -m tests.support.redis_worker`` reads one JSON command per line on stdin and
writes one JSON answer per line on stdout. It builds ``RedisPool``s, and calls
their ``run`` from its own event loop (as a request would), while the jobs run on
the pool's job loop. Jobs report to Redis under ``test:{namespace}:`` (outside the
pool's keys): ``started`` (a list of keys, in start order), ``active`` / ``peak``
(jobs running now / at most, across every process), ``runs:KEY``; a job with a
``gate`` waits until the key ``test:{namespace}:gate:NAME`` exists.

A job with ``"log": DIR`` reports to files instead, so that its evidence survives
whatever happens to Redis (the fault-injection tests): ``fn()`` appends ``start``
and, when it ends, ``end`` to ``DIR/ev-PID.log``, and the call's ``on_drop`` appends
``drop`` (JSON lines: event, key, call id, pid, ``time.monotonic()``, one clock for
every process of the host); its ``gate`` is the file ``DIR/gate-NAME``. ``Evidence``
reads them back and checks the limits over the whole timeline.

Commands (``id`` echoed in the answer):
``{"op": "pool", "name", "namespace", "url", "slots", "queue", "wait", "lease", "fallback",
"timeout"}``;
``{"op": "run", "pool", "key", "caller", "job": {...} | null}`` (null: join only),
answered when the call ends; ``{"op": "cancel", "of": ID}`` (the call's caller leaves, once
the call is inside ``pool.run``);
``{"op": "counts", "pool"}``; ``{"op": "mode", "pool"}`` (no Redis call);
``{"op": "drain" | "stop", "pool"}``; ``{"op": "exit"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))

# --- the worker ----------------------------------------------------------------

PEAK = """
local n = redis.call('INCR', KEYS[1])
if n > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], n) end
return n
"""


def _job(url: str, namespace: str, key: str, spec: dict[str, Any]):
    import redis.asyncio as aredis

    prefix = f"test:{namespace}:"

    async def fn() -> Any:
        async with aredis.Redis.from_url(url, decode_responses=True) as client:
            return await body(client)

    async def body(client: Any) -> Any:
        report = spec.get("report", True)  # False: the job needs no Redis (restart tests)
        if report:
            await client.eval(PEAK, 2, prefix + "active", prefix + "peak")
            await client.rpush(prefix + "started", key)
            await client.incr(prefix + "runs:" + key)
        try:
            gate = spec.get("gate")
            while gate and not await opened(client, prefix + "gate:" + gate):
                await asyncio.sleep(0.005)
            await asyncio.sleep(spec.get("sleep", 0))
            if spec.get("error"):
                raise LookupError(spec["error"])
            return spec.get("result", key)
        finally:
            if report:
                await client.decr(prefix + "active")

    async def opened(client: Any, gate: str) -> bool:
        """Whether the gate is open; a read that timed out (the worker was stopped mid-read,
        SIGSTOP) is asked again."""
        try:
            return bool(await client.exists(gate))
        except aredis.TimeoutError:
            return False

    return fn


def record(log: str, event: str, key: str, cid: str) -> None:
    """Append one line of evidence (one write of a short line to a file of this process's)."""
    line = json.dumps(
        {"ev": event, "key": key, "cid": cid, "pid": os.getpid(), "t": time.monotonic()}
    )
    fd = os.open(os.path.join(log, f"ev-{os.getpid()}.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _logged_job(log: str, key: str, cid: str, spec: dict[str, Any]):
    """A job that leaves its evidence in files (see the module's docstring)."""

    async def fn() -> Any:
        record(log, "start", key, cid)
        try:
            gate = spec.get("gate")
            while gate and not os.path.exists(os.path.join(log, "gate-" + gate)):
                await asyncio.sleep(0.005)
            await asyncio.sleep(spec.get("sleep", 0))
            return spec.get("result", key)
        finally:
            record(log, "end", key, cid)

    def on_drop() -> None:
        record(log, "drop", key, cid)

    return fn, on_drop


async def _serve() -> None:
    from django_pdfpool.admission import RedisPool

    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    pools: dict[str, tuple[RedisPool, str, str]] = {}
    calls: dict[str, asyncio.Task[None]] = {}
    entered: dict[str, asyncio.Event] = {}  # set once the call awaits pool.run
    began = time.monotonic()

    def answer(**fields: Any) -> None:
        fields["t"] = time.monotonic() - began
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    async def call(cid: str, pool: RedisPool, url: str, ns: str, cmd: dict[str, Any]) -> None:
        spec = cmd.get("job")
        fn, on_drop = None, None
        if spec is not None and "log" in spec:
            fn, on_drop = _logged_job(spec["log"], cmd["key"], cid, spec)
        elif spec is not None:
            fn = _job(url, ns, cmd["key"], spec)
        try:
            entered[cid].set()
            result = await pool.run(cmd["key"], cmd["caller"], fn, on_drop=on_drop)
        except asyncio.CancelledError:
            answer(id=cid, error="CancelledError")
        except Exception as error:
            answer(
                id=cid,
                error=type(error).__name__,
                code=getattr(error, "code", None),
                message=str(error),
            )
        else:
            answer(id=cid, ok=result)

    async def _cancel(task: asyncio.Task[None], inside: asyncio.Event, cid: str) -> None:
        await inside.wait()
        await asyncio.sleep(0)  # let run() reach its first await
        task.cancel()
        answer(id=cid, ok=True)

    answer(id="ready", ok=os.getpid())
    while (line := await lines.get()) is not None:
        cmd = json.loads(line)
        op, cid = cmd["op"], cmd.get("id", "")
        if op == "pool":
            pool = RedisPool(
                cmd.get("slots", 2),
                cmd.get("queue", 4),
                cmd.get("wait", 10.0),
                url=cmd["url"],
                namespace=cmd["namespace"],
                lease=cmd.get("lease", 1.0),
                fallback=cmd.get("fallback", "refuse"),
                timeout=cmd.get("timeout", 1.0),
            )
            pools[cmd["name"]] = (pool, cmd["url"], cmd["namespace"])
            answer(id=cid, ok=pool.process)
        elif op == "run":
            pool, url, ns = pools[cmd["pool"]]
            entered[cid] = asyncio.Event()
            calls[cid] = asyncio.create_task(call(cid, pool, url, ns, cmd))
        elif op == "cancel":  # once the call is inside pool.run (a caller that leaves)
            calls[cid] = asyncio.create_task(_cancel(calls[cmd["of"]], entered[cmd["of"]], cid))
        elif op == "counts":
            pool = pools[cmd["pool"]][0]
            counts = await asyncio.to_thread(lambda p=pool: (p.running(), p.queued(), p.mode))
            answer(id=cid, ok=list(counts))
        elif op == "mode":
            answer(id=cid, ok=pools[cmd["pool"]][0].mode)
        elif op in ("drain", "stop"):
            await getattr(pools[cmd["pool"]][0], op)()
            answer(id=cid, ok=True)
        elif op == "exit":
            break
    for task in calls.values():
        task.cancel()


# --- the test side ---------------------------------------------------------------


class Worker:
    """A worker process (spawned: a fresh interpreter, not a fork) and its answers."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.redis_worker"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._answers: dict[str, dict[str, Any]] = {}
        self._changed = threading.Condition()
        self._count = 0
        threading.Thread(target=self._read, daemon=True).start()

    def ready(self) -> Worker:
        """Wait until the worker has imported everything and listens."""
        self.pid = self.answer("ready", timeout=30)["ok"]
        return self

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            with self._changed:
                self._answers[message["id"]] = message
                self._changed.notify_all()

    def send(self, op: str, **fields: Any) -> str:
        """Send a command; return its id (its answer comes with ``answer``)."""
        self._count += 1
        cid = fields.pop("id", None) or f"{op}{self._count}"
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, "id": cid, **fields}) + "\n")
        self.process.stdin.flush()
        return cid

    def answer(self, cid: str, timeout: float = 10.0) -> dict[str, Any]:
        with self._changed:
            if not self._changed.wait_for(lambda: cid in self._answers, timeout):
                raise AssertionError(f"no answer to {cid} within {timeout} s")
            return self._answers[cid]

    def done(self, cid: str) -> bool:
        with self._changed:
            return cid in self._answers

    def ask(self, op: str, timeout: float = 10.0, **fields: Any) -> Any:
        """Send and wait: the answer's ``ok`` (fails on an error answer)."""
        message = self.answer(self.send(op, **fields), timeout)
        assert "error" not in message, message
        return message["ok"]

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("exit")
                self.process.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


# --- the evidence the logged jobs leave --------------------------------------------


@dataclass
class Span:
    """One ``fn()`` of one call: from its start to its end (None: not ended)."""

    key: str
    cid: str
    pid: int
    start: float
    end: float | None


class Evidence:
    """What the logged jobs of every process wrote in ``directory`` (see ``record``)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.deaths: dict[int, float] = {}  # pid -> a time by which it was dead

    def open(self, gate: str) -> None:
        (self.directory / ("gate-" + gate)).touch()

    def died(self, pid: int, at: float) -> None:
        """The process ``pid`` was dead at monotonic ``at``: its jobs ended by then."""
        self.deaths[pid] = at

    def records(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.directory.glob("ev-*.log")):
            for line in path.read_text().splitlines():
                if line.endswith("}"):  # a line being written is skipped, not misread
                    found.append(json.loads(line))
        return sorted(found, key=lambda r: r["t"])

    def spans(self) -> list[Span]:
        spans: dict[str, Span] = {}
        for rec in self.records():
            if rec["ev"] == "start":
                spans[rec["cid"]] = Span(rec["key"], rec["cid"], rec["pid"], rec["t"], None)
            elif rec["ev"] == "end" and rec["cid"] in spans:
                spans[rec["cid"]].end = rec["t"]
        for span in spans.values():
            if span.end is None and span.pid in self.deaths:
                span.end = self.deaths[span.pid]
        return list(spans.values())

    def running(self, key: str | None = None) -> list[Span]:
        """Jobs running now (started, not ended, their process alive)."""
        return [s for s in self.spans() if s.end is None and key in (None, s.key)]

    def started(self, key: str) -> int:
        return sum(span.key == key for span in self.spans())

    def fates(self) -> dict[str, list[str]]:
        """Call id -> what happened to it: ``start`` (fn was called) and/or ``drop``."""
        fates: dict[str, list[str]] = {}
        for rec in self.records():
            if rec["ev"] in ("start", "drop"):
                fates.setdefault(rec["cid"], []).append(rec["ev"])
        return fates

    def breaches(self, slots: int, relaxed: Iterable[tuple[float, float]] = ()) -> list[str]:
        """Every moment the limits did not hold, over the whole timeline: the same key
        running twice at once, or more than ``slots`` jobs running. Per process always;
        across processes but inside the ``relaxed`` windows (monotonic ``(from, to)``:
        a local fallback, whose limits are per process)."""
        relaxed = list(relaxed)
        spans = self.spans()
        ends = {end for _, end in relaxed if end != float("inf")}  # inf: not over yet
        moments = sorted({s.start for s in spans} | ends)
        found = []
        for t in moments:
            now = [s for s in spans if s.start <= t and (s.end is None or s.end > t)]
            scopes = [[s for s in now if s.pid == pid] for pid in {s.pid for s in now}]
            if not any(a <= t < b for a, b in relaxed):
                scopes.append(now)
            for scope in scopes:
                keys = [s.key for s in scope]
                where = "in one process" if len({s.pid for s in scope}) == 1 else "cluster-wide"
                if len(scope) > slots:
                    found.append(f"t={t:.3f}: {len(scope)} jobs running {where}: {_shown(scope)}")
                if len(set(keys)) < len(keys):
                    found.append(f"t={t:.3f}: a key running twice {where}: {_shown(scope)}")
        return sorted(set(found))


def _shown(spans: list[Span]) -> str:
    return ", ".join(f"{s.key}@{s.pid}({s.cid})" for s in sorted(spans, key=lambda s: s.start))


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    asyncio.run(_serve())
