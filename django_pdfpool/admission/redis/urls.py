"""A Redis URL as it may be shown (pages, JSON, repr, logs, checks): no secret in it. A leaf
without redis-py, so that settings can be checked without the extra installed."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

MASK = "***"
UNSHOWN = "<a Redis URL that cannot be shown>"  # anything that does not parse as a URL

_SECRET_NAME = re.compile(r"pass|pwd|auth|token|secret|key|cred", re.IGNORECASE)
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*", re.IGNORECASE)
_DB = re.compile(r"/?\d*")


def presentable(url: object) -> str:
    """``url`` with every password masked, in the userinfo (a lone user name too) and in
    query parameters named like secrets; a path not a db number masked (docs/cluster.md)."""
    if not isinstance(url, str) or any(not char.isprintable() for char in url):
        return UNSHOWN
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return UNSHOWN
    if not _SCHEME.fullmatch(parts.scheme) or not url[len(parts.scheme) :].startswith("://"):
        return UNSHOWN
    if "@" in url[len(parts.scheme) + 3 + len(parts.netloc) :]:  # a password's "/", "?", "#"
        return UNSHOWN  # cut the userinfo short: what came before it would show
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if at:
        name, colon, _ = userinfo.partition(":")
        userinfo = f"{name}:{MASK}" if colon else MASK
    path = parts.path
    if parts.scheme.lower() != "unix" and not _DB.fullmatch(path):
        path = "/" + MASK
    query = re.sub(r"[^&;]+", _masked, parts.query)  # redis-py splits on "&"; ";" to be safe
    return f"{parts.scheme}://{userinfo}{at}{hostport}{path}" + (f"?{query}" if query else "")


def _masked(parameter: re.Match[str]) -> str:
    name = parameter[0].partition("=")[0]
    return f"{name}={MASK}" if _SECRET_NAME.search(unquote(name)) else parameter[0]
