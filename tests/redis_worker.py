"""A worker process for the cross-process tests, and the test side's handle on it.

``python -m tests.redis_worker`` reads one JSON command per line on stdin and
writes one JSON answer per line on stdout. It builds ``RedisPool``s, and calls
their ``run`` from its own event loop (as a request would), while the jobs run on
the pool's job loop. Jobs report to Redis under ``test:{namespace}:`` (outside the
pool's keys): ``started`` (a list of keys, in start order), ``active`` / ``peak``
(jobs running now / at most, across every process), ``runs:KEY``; a job with a
``gate`` waits until the key ``test:{namespace}:gate:NAME`` exists.

Commands (``id`` echoed in the answer):
``{"op": "pool", "name", "namespace", "url", "slots", "queue", "wait", "lease", "fallback"}``
``{"op": "run", "pool", "key", "caller", "job": {...} | null}`` (null: join only),
answered when the call ends; ``{"op": "cancel", "of": ID}``;
``{"op": "counts", "pool"}``; ``{"op": "drain" | "stop", "pool"}``; ``{"op": "exit"}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
            while gate and not await client.exists(prefix + "gate:" + gate):
                await asyncio.sleep(0.005)
            await asyncio.sleep(spec.get("sleep", 0))
            if spec.get("error"):
                raise LookupError(spec["error"])
            return spec.get("result", key)
        finally:
            if report:
                await client.decr(prefix + "active")

    return fn


async def _serve() -> None:
    from django_pdfpool.pool import RedisPool

    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(lines.put_nowait, line)
        loop.call_soon_threadsafe(lines.put_nowait, None)

    threading.Thread(target=read, daemon=True).start()
    pools: dict[str, tuple[RedisPool, str, str]] = {}
    calls: dict[str, asyncio.Task[None]] = {}
    began = time.monotonic()

    def answer(**fields: Any) -> None:
        fields["t"] = time.monotonic() - began
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    async def call(cid: str, pool: RedisPool, url: str, ns: str, cmd: dict[str, Any]) -> None:
        spec = cmd.get("job")
        fn = None if spec is None else _job(url, ns, cmd["key"], spec)
        try:
            result = await pool.run(cmd["key"], cmd["caller"], fn)
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
            )
            pools[cmd["name"]] = (pool, cmd["url"], cmd["namespace"])
            answer(id=cid, ok=pool.process)
        elif op == "run":
            pool, url, ns = pools[cmd["pool"]]
            calls[cid] = asyncio.create_task(call(cid, pool, url, ns, cmd))
        elif op == "cancel":
            calls[cmd["of"]].cancel()
            answer(id=cid, ok=True)
        elif op == "counts":
            pool = pools[cmd["pool"]][0]
            counts = await asyncio.to_thread(lambda p=pool: (p.running(), p.queued(), p.mode))
            answer(id=cid, ok=list(counts))
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
            [sys.executable, "-m", "tests.redis_worker"],
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


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    asyncio.run(_serve())
