"""Helpers of the Redis pool's namespace tests."""

from __future__ import annotations

import asyncio


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), 30))
