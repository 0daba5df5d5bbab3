"""Helpers of the pools' fault tests
(tests/admission/test_job_faults.py, tests/admission/redis/test_outages.py)."""

from __future__ import annotations

import asyncio


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), 60))


async def _answer():
    return 42
