"""Both sides: what parent and child say to each other (options, job line, answer lines):
JSON, never pickle, as the parent trusts no byte a child writes."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from ..bounds import one_of
from ..exceptions import EXTRACTION_MESSAGES, ExtractionError

ENGINES = ("pypdf", "pypdfium2")  # pypdf is imported by every child; others on request
ENGINE = one_of(ENGINES)  # besides "module:function" engines (extract.register_engine)
READY = b"ready\n"  # the child's first line: imports done, waiting for its job
STARTED = b"started\n"  # its second: the job is read and the limits are set
DEFAULT_MAX_TEXT_BYTES = 8 << 20  # of the pages' text a job may return (PDFPOOL's default)
METADATA_KEYS = 64  # /Info entries kept
METADATA_CHARS = 2000  # of each key and value
# An answer's bytes besides its pages (metadata at its worst: every character a 6-byte JSON
# escape), read beyond the text cap; a child that writes more is refused as too_large.
ANSWER_OVERHEAD = METADATA_KEYS * (2 * METADATA_CHARS * 6 + 6) + (64 << 10)
DETAIL_CHARS = 200  # of a failure's detail, as the parent keeps it
PRELOAD_OPTION = "--preload"  # followed by an engine to import before the job arrives
WARM_UP_OPTION = "--warm-up"  # run a tiny document through the engines before READY
TEMPLATE_OPTION = "--template"  # fork one child per request instead of doing a job
PARENT_OPTION = "--parent"  # followed by the parent's pid: die with it
READY_OPTION = "--ready"  # the template's "N,SECONDS": keep up to N ready children, SECONDS idle
SANDBOX_OPTION = "--sandbox"  # followed by the level the child must reach (confine.LEVELS), or
SANDBOX_OFF = "off"  # no layer at all (tests that show what the layers stop); absent: "none"
PROBE_OPTION = "--probe"  # put on every layer, print what was had as JSON, exit
NICE_OPTION = "--nice"  # followed by how much the child lowers its priority below its parent's
DEFAULT_NICE = 5  # below the server's threads, not starved by other work (docs/security.md)
_LONE_SURROGATES = re.compile("[\ud800-\udfff]")


class ChildOptions(NamedTuple):
    """A child's command line, parsed: what to preload, whether to warm up, its role."""

    preload: tuple[str, ...]
    warm_up: bool
    template: bool = False
    parent: int | None = None
    ready: tuple[int, float] = (0, 0.0)  # the template's ready children: most, idle seconds
    sandbox: str = "none"  # the sandbox level it must reach, or SANDBOX_OFF
    probe: bool = False
    nice: int = DEFAULT_NICE


def child_options(
    preload: tuple[str, ...],
    warm_up: bool,
    *,
    template: bool = False,
    parent: int | None = None,
    ready: tuple[int, float] = (0, 0.0),
    sandbox: str = "none",
    nice: int = DEFAULT_NICE,
) -> list[str]:
    """The child's command line (`ChildOptions`, the parent to die with last)."""
    options = [part for engine in preload for part in (PRELOAD_OPTION, engine)]
    options += [SANDBOX_OPTION, sandbox] if sandbox != "none" else []
    options += [NICE_OPTION, str(nice), *[WARM_UP_OPTION] * warm_up, *[TEMPLATE_OPTION] * template]
    options += [READY_OPTION, f"{ready[0]},{ready[1]}"] if template and ready[0] else []
    return options if parent is None else [*options, PARENT_OPTION, str(parent)]


def read_child_options(argv: list[str]) -> ChildOptions:
    """The options `child_options()` wrote."""

    def value(option: str, default: Any) -> Any:
        return next((argv[i + 1] for i, arg in enumerate(argv) if arg == option), default)

    most, idle = value(READY_OPTION, "0,0").split(",")
    parent = value(PARENT_OPTION, None)
    return ChildOptions(
        tuple(argv[i + 1] for i, arg in enumerate(argv) if arg == PRELOAD_OPTION),
        WARM_UP_OPTION in argv,
        TEMPLATE_OPTION in argv,
        None if parent is None else int(parent),
        (int(most), float(idle)),
        value(SANDBOX_OPTION, "none"),
        PROBE_OPTION in argv,
        int(value(NICE_OPTION, DEFAULT_NICE)),
    )


@dataclass(frozen=True)
class ExtractionJob:
    """One extraction as the parent hands it to a child: the file and the limits to obey."""

    path: str  # a regular file: the child reads it, the parent never does
    engine: str  # one of ENGINES
    timeout: float  # seconds; the child's CPU limit and alarm follow from it
    memory_limit: int  # bytes of address space
    max_pages: int | None
    refuse: bool  # over max_pages: too_many_pages rather than the first max_pages pages
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES  # the pages' JSON, see engines.TextBudget


def encode_job(job: ExtractionJob) -> bytes:
    """The job line the parent writes to the child's stdin."""
    return (json.dumps(asdict(job)) + "\n").encode()


def decode_job(line: bytes) -> ExtractionJob:
    """The job the child reads from its stdin (the parent's line: trusted)."""
    return ExtractionJob(**json.loads(line))


def answer_limit(max_text_bytes: int) -> int:
    """The most bytes the parent reads from a child whose text is capped at `max_text_bytes`."""
    return max_text_bytes + ANSWER_OVERHEAD


@dataclass
class Extracted:
    """A child's answer for a document it read: the fields of an Extraction but its text."""

    sha256: str  # of the bytes the child parsed
    page_count: int  # pages in the document, even when truncated
    pages: list[str]
    metadata: dict[str, str]  # the /Info entries, keys without their leading slash
    truncated: bool  # stopped at max_pages or cut at the text cap
    text_truncated: bool = False  # cut at the text cap (max_text_bytes)
    elapsed: float = 0.0  # seconds from job to answer: set by the child just before writing
    peak_rss: int = 0  # bytes: likewise


ChildAnswer = Extracted | ExtractionError  # a failure travels as the error's code and figures


def encode_answer(answer: ChildAnswer) -> bytes:
    """The child's answer line; lone surrogates (seen in broken /ToUnicode maps) become U+FFFD."""
    if isinstance(answer, ExtractionError):
        fields: dict[str, Any] = {"ok": False, "code": answer.code, "detail": answer.detail}
        fields.update(elapsed=answer.elapsed, peak_rss=answer.peak_rss)
    else:
        fields = {"ok": True, **vars(answer)}
    line = json.dumps(fields, ensure_ascii=False, separators=(",", ":")) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATES.sub("\ufffd", line).encode("utf-8")


def decode_answer(output: bytes | bytearray) -> ChildAnswer | None:
    """The answer in all a child wrote (its last line), or None; a bytearray is emptied."""
    if not output.endswith(b"\n"):
        return None  # cut short: no complete answer
    try:
        with memoryview(output) as view, view[output.rfind(b"\n", 0, -1) + 1 :] as line:
            text = str(line, "utf-8")  # the one copy: no bytes slice on the way
        if isinstance(output, bytearray):
            output.clear()  # the buffer goes before the parsed pages arrive
        fields = json.loads(text)
        del text
        if not isinstance(fields, dict):
            return None
        if fields.get("ok") is True:
            return _extracted(fields)
        return _failure(fields)
    except (ValueError, OverflowError, RecursionError):  # not JSON, or absurd numbers
        return None


_ANSWER_TYPES: dict[str, type | tuple[type, ...]] = {
    "sha256": str, "page_count": int, "pages": list, "metadata": dict, "truncated": bool,
    "text_truncated": bool, "elapsed": (int, float), "peak_rss": int,
}  # fmt: skip


def _extracted(fields: dict[str, Any]) -> Extracted | None:
    fields.setdefault("text_truncated", False)
    if not all(isinstance(fields.get(name), kind) for name, kind in _ANSWER_TYPES.items()):
        return None
    if not all(isinstance(page, str) for page in fields["pages"]) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in fields["metadata"].items()
    ):
        return None
    values = {name: fields[name] for name in _ANSWER_TYPES}
    return Extracted(**{**values, "elapsed": float(values["elapsed"])})


def _failure(fields: dict[str, Any]) -> ExtractionError | None:
    code = fields.get("code")
    if not isinstance(code, str) or code not in EXTRACTION_MESSAGES:
        return None
    elapsed, peak_rss = fields.get("elapsed"), fields.get("peak_rss")
    elapsed = float(elapsed) if isinstance(elapsed, (int, float)) else None
    peak_rss = peak_rss if isinstance(peak_rss, int) else None
    detail = str(fields.get("detail", ""))[:DETAIL_CHARS]
    return ExtractionError(code, detail=detail, elapsed=elapsed, peak_rss=peak_rss)


# --- the template's control socket: requests and answers, both sides -----------------------

FORK_REQUEST = b"F"  # answer: a job's child
PIDS_REQUEST = b"P"  # answer: the ready children's pids
PID_FORMAT = "=i"  # a pid in an answer (a child's pidfd and pipes ride along)
STATUS_FORMAT = "=i"  # on the status pipe: the exit code (-N: killed by signal N)
