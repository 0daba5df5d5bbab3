"""Child side: the PDF engines (pypdf, pypdfium2) turning a document's bytes into text;
failures are ExtractionErrors with a public code (`classify` gives any exception one)."""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import importlib
import io
import re
import zlib
from collections.abc import Callable
from typing import Any

from ..exceptions import ExtractionError
from .wire import DEFAULT_MAX_TEXT_BYTES, METADATA_CHARS, METADATA_KEYS, SEPARATOR

HEADER_WINDOW = 1024  # readers accept "%PDF-" anywhere in the first kilobyte


def _warm_up_pdf() -> bytes:
    """A one-page PDF both engines read at start-up (xref, Flate, a standard font, /Info)."""
    content = zlib.compress(b"BT /F1 12 Tf 20 100 Td (warm) Tj T* [(up)-250(text)] TJ ET")
    objects = [
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[3 0 R]/Count 1>>",
        b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]/Contents 4 0 R"
        b"/Resources<</Font<</F1 5 0 R>>>>>>",
        b"<</Length %d/Filter/FlateDecode>>stream\n%s\nendstream" % (len(content), content),
        b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica/Encoding/WinAnsiEncoding>>",
        b"<</Title(warm)/Producer(pdfpool)>>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref, size = len(out), len(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<</Size %d/Root 1 0 R/Info 6 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


WARM_UP_PDF = _warm_up_pdf()

# The warm-up document's encryptions the template reads (docs/performance.md).
WARM_UP_ENCRYPTIONS = ("RC4-128", "AES-128", "AES-256")


def encrypted_warm_ups() -> list[bytes]:
    """The warm-up document encrypted each way pypdf can write here (writing AES needs a
    library; reading AES-128 does not, its keys being RC4 and MD5)."""
    from pypdf import PdfWriter
    from pypdf.errors import DependencyError

    found = []
    for algorithm in WARM_UP_ENCRYPTIONS:
        writer, out = PdfWriter(clone_from=io.BytesIO(WARM_UP_PDF)), io.BytesIO()
        with contextlib.suppress(DependencyError):
            writer.encrypt("", "pdfpool", algorithm=algorithm)
            writer.write(out)
            found.append(out.getvalue())
    return found


# The codecs pypdf decodes text with, imported at start rather than in each forked child.
PYPDF_CODECS = ("charmap", "latin-1", "ascii", "utf-16", "utf-16-be", "utf-16-le", "cp1252")


def preload(engine: str) -> None:
    """Import an engine before the job is read (pypdf also gets its job-independent settings)."""
    if engine == "pypdf":
        configure_pypdf()
        for name in PYPDF_CODECS:
            codecs.lookup(name)
    elif engine == "pypdfium2":
        import pypdfium2  # type: ignore[import-untyped]  # noqa: F401
    elif ":" in engine:  # registered in the parent (extract.register_engine)
        registered(engine)
    else:
        raise ValueError(f"unknown engine {engine!r}")


def registered(engine: str) -> Any:
    """The function a registered engine ("module:function") names: bytes in, pages out."""
    module, _, name = engine.partition(":")
    return getattr(importlib.import_module(module), name)


# pypdf.Configuration's fields capping what one stream may grow to; before pypdf 7, filters'
_OUTPUT_CAPS = ("zlib_maximum_output_length", "lzw_maximum_output_length",
    "run_length_maximum_output_length", "array_based_stream_maximum_output_length",
    "brotli_maximum_output_length", "jbig2_maximum_output_length", "image_maximum_buffer_size",
    "maximum_declared_stream_length")  # fmt: skip
_LEGACY_CAPS = ("ZLIB_MAX_OUTPUT_LENGTH", "LZW_MAX_OUTPUT_LENGTH",
    "MAX_ARRAY_BASED_STREAM_OUTPUT_LENGTH", "MAX_DECLARED_STREAM_LENGTH")  # fmt: skip


def configure_pypdf(memory_limit: int | None = None) -> None:
    """No external jbig2dec process, quiet logging and, given a job's memory limit, what one
    stream may grow to: a quarter of it, at most 75 MB."""
    import logging

    import pypdf
    from pypdf import filters

    cap = None if memory_limit is None else max(1 << 20, min(memory_limit // 4, 75_000_000))
    # pypdf logs thousands of warnings on some real files; formatting them costs time.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    if hasattr(pypdf, "overwrite_configuration"):  # pypdf >= 7
        known = {field.name for field in dataclasses.fields(pypdf.Configuration)}
        caps: dict[str, Any] = {name: cap for name in _OUTPUT_CAPS if name in known and cap}
        pypdf.overwrite_configuration(jbig2dec_binary=None, disable_legacy_handling=True, **caps)
        return
    if hasattr(filters, "JBIG2DEC_BINARY"):  # older pypdf reads module constants at call time
        filters.JBIG2DEC_BINARY = None
    for name in _LEGACY_CAPS:
        if cap is not None and hasattr(filters, name):
            setattr(filters, name, cap)


class TextBudget:
    """The pages a job returns, cut so that their UTF-8 and a separator after each (the
    answer's, see wire.encode_answer) fit `limit`."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.pages: list[str] = []
        self.cut = False  # some text was left out

    def add(self, page: str) -> bool:
        """Keep `page`, or as much of it as fits; False once the budget is spent."""
        room = self.left - len(SEPARATOR.encode())
        if room >= 0 and len(page) <= room and (size := utf8_size(page)) <= room:
            self.pages.append(page)
            self.left = room - size
            return True
        if room > 0:
            self.pages.append(fit(page, room))
        self.left, self.cut = 0, True
        return False


def utf8_size(text: str) -> int:
    """Bytes of `text` in the answer (a lone surrogate, U+FFFD there, is 3 as well)."""
    return len(text.encode("utf-8", "surrogatepass"))


def fit(text: str, room: int) -> str:
    """The longest prefix of `text` whose utf8_size is at most `room`."""
    data = text[:room].encode("utf-8", "surrogatepass")  # every character a byte at least
    end = min(room, len(data))
    while end < len(data) and data[end] & 0xC0 == 0x80:  # back out of a cut character
        end -= 1
    return data[:end].decode("utf-8", "surrogatepass")


def extract_pages(
    engine: str,
    data: bytes,
    max_pages: int | None,
    refuse: bool,
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
) -> dict[str, Any]:
    """The text of `data` by `engine` (Extracted's fields); no page is read past the text cap."""
    if b"%PDF-" not in data[:HEADER_WINDOW]:  # does not even claim to be a PDF
        raise ExtractionError("not_a_pdf", detail="empty file" if not data else "no %PDF- header")
    if ":" in engine:  # a registered engine: its every page, no metadata
        texts, max_pages = registered(engine)(data), None
        opened: _Opened = len(texts), texts.__getitem__, dict
    else:
        opened = (_open_pdfium if engine == "pypdfium2" else _open_pypdf)(data, max_pages, refuse)
    page_count, page_text, metadata = opened
    count = _page_range(page_count, max_pages, refuse)
    budget = TextBudget(max_text_bytes)
    for index in range(count):
        if not budget.add(page_text(index)):
            break
    truncated = count < page_count or budget.cut
    return {"page_count": page_count, "pages": budget.pages, "metadata": metadata(),
            "truncated": truncated, "text_truncated": budget.cut}  # fmt: skip


def _page_range(page_count: int, max_pages: int | None, refuse: bool) -> int:
    if max_pages is None or page_count <= max_pages:
        return page_count
    if refuse:
        raise ExtractionError("too_many_pages", detail=f"{page_count} pages")
    return max_pages


def _clean_metadata(items: Any) -> dict[str, str]:
    metadata: dict[str, str] = {}
    for key, value in items:
        if len(metadata) >= METADATA_KEYS:
            break
        if isinstance(value, (str, int, float)):
            name = str(key).lstrip("/")[:METADATA_CHARS]
            metadata[name] = str(value).replace("\x00", "")[:METADATA_CHARS]
    return metadata


# An opened document: its page count, a page's text by index, its metadata (read last).
_Opened = tuple[int, Callable[[int], str], Callable[[], dict[str, str]]]


def _open_pypdf(data: bytes, max_pages: int | None, refuse: bool) -> _Opened:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))  # tries the empty password by itself
    if refuse and max_pages is not None:  # on the declared count: no walk of a huge page tree
        trailer: Any = reader.trailer
        try:  # its /Root's /Pages' /Count, each resolved by pypdf
            count = trailer["/Root"]["/Pages"]["/Count"]
        except MemoryError:
            raise
        except Exception:  # broken or odd: the page tree's own walk decides
            count = 0
        if isinstance(count, int) and not isinstance(count, bool):
            _page_range(count, max_pages, refuse)

    def metadata() -> dict[str, str]:
        try:
            info = reader.metadata
            return _clean_metadata((key, info[key]) for key in info) if info else {}
        except MemoryError:
            raise
        except Exception:  # a broken /Info does not spoil the text
            return {}

    # len(reader.pages) is the real count: a /Count that lies low is caught there
    return len(reader.pages), lambda index: reader.pages[index].extract_text(), metadata


def _open_pdfium(data: bytes, max_pages: int | None, refuse: bool) -> _Opened:
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw  # type: ignore[import-untyped]

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        locked = exc.err_code in (raw.FPDF_ERR_PASSWORD, raw.FPDF_ERR_SECURITY)
        code = "encrypted" if locked else "malformed"
        raise ExtractionError(code, detail=f"pdfium error {exc.err_code}") from None

    def page_text(index: int) -> str:
        page = document[index]
        textpage = page.get_textpage()
        text: str = textpage.get_text_range().replace("\r\n", "\n")
        textpage.close()
        page.close()
        return text

    def metadata() -> dict[str, str]:
        try:
            return _clean_metadata(document.get_metadata_dict(skip_empty=True).items())
        except pdfium.PdfiumError:
            return {}
        finally:
            document.close()

    return len(document), page_text, metadata


# pypdf's LimitReachedError covers size caps, work budgets and broken structures alike.
_TOO_LARGE = re.compile(
    r"decompress|decoding|memory|buffer|output|stream size|row length|columns", re.I
)
_TOO_COMPLEX = re.compile(r"token|budget|parsing|invocation", re.I)


def classify(exc: BaseException) -> tuple[str, str]:
    """The public code for an exception raised while extracting, and a log-safe detail."""
    name = type(exc).__name__
    if isinstance(exc, ExtractionError):
        return exc.code, exc.detail
    if isinstance(exc, MemoryError):
        return "too_large", name
    if isinstance(exc, OSError):  # the job's own file could not be read: not the PDF's fault
        return "crashed", name
    from pypdf import errors

    if isinstance(exc, (errors.FileNotDecryptedError, errors.DependencyError)):
        # DependencyError: AES needs the optional `cryptography`; the file is locked to us.
        return "encrypted", name
    if isinstance(exc, errors.EmptyFileError):
        return "not_a_pdf", name
    limit = str(exc) if isinstance(exc, errors.LimitReachedError) else ""
    if _TOO_COMPLEX.search(limit):
        return "too_complex", name
    if _TOO_LARGE.search(limit):
        return "too_large", name
    return "malformed", name  # other limits (cycles, depths, entry counts): a broken structure
