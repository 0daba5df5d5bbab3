"""Both sides: what parent and child say to each other (options, job line, answer): JSON and
UTF-8 text counted in pieces, never pickle, as the parent trusts no byte a child writes."""

from __future__ import annotations

import itertools
import json
import math
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
# An answer's bytes besides its pages' text (which the cap counts, in UTF-8, with a separator),
# read beyond the text cap: its header line, its metadata in raw UTF-8 (4 bytes a character at
# worst) and a 3-byte SEPARATOR between pieces, up to MAX_ANSWER_PAGES of them; 6 bytes a
# metadata character leave room for those. A child that writes more is refused as too_large.
ANSWER_OVERHEAD = METADATA_KEYS * (2 * METADATA_CHARS * 6 + 6) + (64 << 10)
DETAIL_CHARS = 200  # of a failure's detail, as the parent keeps it
SANDBOX_OFF = "off"  # no layer at all (tests that show what the layers stop)
PROBE_OPTION = "--probe"  # put on every layer, print what was had as JSON, exit
DEFAULT_NICE = 5  # below the server's threads, not starved by other work (docs/security.md)
_LONE_SURROGATES = re.compile("[\ud800-\udfff]")
SEPARATOR = "\uffff"  # between an answer's pieces: a noncharacter, 3 bytes as commas and quotes
HEADER_BYTES = 4096  # an answer's JSON header line at most: its text follows, counted by pieces
MAX_ANSWER_PAGES = 100_000  # an answer's pages: a str each in the parent (about 60 bytes)


class ChildOptions(NamedTuple):
    """A child's command line, parsed: each field's option, and what it says."""

    preload: tuple[str, ...]  # --preload ENGINE: import it before the job arrives
    warm_up: bool  # --warm-up: run a tiny document through the engines before READY
    template: bool = False  # --template: fork one child per request instead of doing a job
    parent: int | None = None  # --parent PID: die with it
    ready: tuple[int, float] = (0, 0.0)  # --ready N,S: up to N ready children, S seconds idle
    sandbox: str = "none"  # --sandbox LEVEL: to reach (confine.LEVELS), or SANDBOX_OFF
    probe: bool = False  # PROBE_OPTION
    nice: int = DEFAULT_NICE  # --nice N: how much it lowers its priority below its parent's


def child_options(preload: tuple[str, ...], warm_up: bool, **role: Any) -> list[str]:
    """The child's command line (`role`: the other `ChildOptions`; the parent to die with last)."""
    o = ChildOptions(preload, warm_up, **role)
    options = [part for engine in preload for part in ("--preload", engine)]
    options += ["--sandbox", o.sandbox] if o.sandbox != "none" else []
    options += ["--nice", str(o.nice), *["--warm-up"] * warm_up]
    options += ["--template"] if o.template else []
    options += ["--ready", f"{o.ready[0]},{o.ready[1]}"] if o.template and o.ready[0] else []
    return options if o.parent is None else [*options, "--parent", str(o.parent)]


def read_child_options(argv: list[str]) -> ChildOptions:
    """The options `child_options()` wrote."""
    value = dict(itertools.pairwise(argv))  # an option's value: the word after it
    most, idle = value.get("--ready", "0,0").split(",")
    parent = value.get("--parent")
    return ChildOptions(
        tuple(word for option, word in itertools.pairwise(argv) if option == "--preload"),
        "--warm-up" in argv,
        "--template" in argv,
        None if parent is None else int(parent),
        (int(most), float(idle)),
        value.get("--sandbox", "none"),
        PROBE_OPTION in argv,
        int(value.get("--nice", DEFAULT_NICE)),
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
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES  # the pages' UTF-8, see engines.TextBudget


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
    """The child's answer: a JSON header line, then (`size` bytes) its metadata's keys and
    values and its pages in UTF-8, joined by SEPARATOR (which, like a lone surrogate, becomes
    U+FFFD in the text). Pages past MAX_ANSWER_PAGES are left out (then `truncated`)."""
    if isinstance(answer, ExtractionError):
        fields: dict[str, Any] = {"ok": False, "code": answer.code, "size": 0}
        fields.update(detail=answer.detail[:DETAIL_CHARS], elapsed=answer.elapsed)
        return json.dumps({**fields, "peak_rss": answer.peak_rss}).encode() + b"\n"
    pages = answer.pages[:MAX_ANSWER_PAGES]
    fields = {"ok": True, **vars(answer), "pages": len(pages), "metadata": len(answer.metadata)}
    fields["truncated"] = answer.truncated or len(pages) < len(answer.pages)
    pieces = [*itertools.chain(*answer.metadata.items()), *pages]
    text = SEPARATOR.join(piece.replace(SEPARATOR, "\ufffd") for piece in pieces)
    try:
        body = text.encode()
    except UnicodeEncodeError:
        body = _LONE_SURROGATES.sub("\ufffd", text).encode()
    return json.dumps({**fields, "size": len(body)}).encode() + b"\n" + body


def _header(output: bytes | bytearray) -> tuple[dict[str, Any], int] | None:
    """An answer's header and where its text starts, once the header's line is whole."""
    start = len(READY) if output.startswith(READY) else 0
    start += len(STARTED) if output.startswith(STARTED, start) else 0
    end = output.find(b"\n", start, start + HEADER_BYTES)
    try:
        fields = json.loads(output[start:end]) if end >= 0 else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(fields, dict) or type(fields.get("size", 0)) is not int:
        return None
    return fields, end + 1


def decode_answer(output: bytes | bytearray) -> ChildAnswer | None:
    """The answer in all a child wrote, or None; a bytearray is emptied. Its pieces are
    counted before one is made, each made from the buffer: the parent holds about the
    answer's bytes and a str per page (docs/security.md)."""
    header = _header(output)
    if header is None or len(output) != header[1] + header[0].get("size", 0):
        return None  # cut short, or more than it said
    (fields, start), separator = header, SEPARATOR.encode()
    pages, keys = fields.get("pages"), fields.get("metadata")
    try:
        if fields.get("ok") is not True:
            return _failure(fields)
        if not (type(pages) is type(keys) is int and pages >= 0 and 0 <= keys <= METADATA_KEYS):
            return None
        if pages > MAX_ANSWER_PAGES:
            return ExtractionError("too_large", detail=f"over {MAX_ANSWER_PAGES} pages")
        count = pages + 2 * keys  # with count - 1 separators; none: no text at all
        if output.count(separator, start) != max(0, count - 1) or count == 0 < len(output) - start:
            return None  # the pieces are not those the header counts
        pieces: list[str] = []
        with memoryview(output) as view:
            while len(pieces) < count:  # a str made from each piece of the buffer: no bytes
                end = output.find(separator, start)
                end = len(output) if end < 0 else end
                with view[start:end] as piece:
                    pieces.append(str(piece, "utf-8"))
                start = end + len(separator)
        metadata = dict(zip(pieces[: 2 * keys : 2], pieces[1 : 2 * keys : 2], strict=True))
        return _extracted({**fields, "pages": pieces[2 * keys :], "metadata": metadata})
    except (UnicodeDecodeError, OverflowError):  # not UTF-8; absurd numbers
        return None
    finally:
        if isinstance(output, bytearray):
            output.clear()


_ANSWER_TYPES: dict[str, type | tuple[type, ...]] = {
    "sha256": str, "page_count": int, "pages": list, "metadata": dict, "truncated": bool,
    "text_truncated": bool, "elapsed": (int, float), "peak_rss": int,
}  # fmt: skip


def _extracted(fields: dict[str, Any]) -> Extracted | None:
    if not all(isinstance(fields.get(name), kind) for name, kind in _ANSWER_TYPES.items()):
        return None
    values = {name: fields[name] for name in _ANSWER_TYPES}
    elapsed, counts = _seconds(values["elapsed"]), (values["page_count"], values["peak_rss"])
    if elapsed is None or any(type(count) is not int or count < 0 for count in counts):
        return None
    if len(values["pages"]) > values["page_count"]:  # more pages than the document has
        return None
    return Extracted(**{**values, "elapsed": elapsed})


def _seconds(value: Any) -> float | None:
    """A child's figure of seconds, if it is one (JSON's NaN and Infinity are not)."""
    seconds = float(value) if isinstance(value, (int, float)) else math.nan
    return seconds if 0 <= seconds < math.inf else None


def _failure(fields: dict[str, Any]) -> ExtractionError | None:
    code = fields.get("code")
    if not isinstance(code, str) or code not in EXTRACTION_MESSAGES:
        return None
    elapsed, peak_rss = _seconds(fields.get("elapsed")), fields.get("peak_rss")
    peak_rss = peak_rss if type(peak_rss) is int and peak_rss >= 0 else None
    detail = str(fields.get("detail", ""))[:DETAIL_CHARS]
    return ExtractionError(code, detail=detail, elapsed=elapsed, peak_rss=peak_rss)


def answer_end(output: bytes | bytearray) -> int | None:
    """Where a child's answer ends in its output, as its header says (None until the header
    line is whole; copies nothing but the header)."""
    header = _header(output)
    return None if header is None else header[1] + header[0].get("size", 0)


# --- the template's control socket: requests and answers, both sides -----------------------

FORK_REQUEST = b"F"  # answer: a job's child
PIDS_REQUEST = b"P"  # answer: the ready children's pids
PID_FORMAT = "=i"  # a pid in an answer (a child's pidfd and pipes ride along)
STATUS_FORMAT = "=iq"  # on the status pipe: exit code (-N: killed by signal N), peak RSS bytes
