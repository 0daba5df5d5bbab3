"""What a Redis-coordinated pool does while Redis fails: the modes and the fallbacks.

A leaf without redis-py, so that settings can be checked without the extra installed."""

from __future__ import annotations

REDIS, LOCAL_FALLBACK, REFUSING = "redis", "local-fallback", "refusing"
FALLBACKS = ("refuse", "local")  # REDIS_FALLBACK: refuse new calls, or run them here
