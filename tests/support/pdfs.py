"""Valid and hostile PDFs built in a few lines each, as bytes, for the extraction tests.

Raw bytes keep every case explicit: what the file holds is what the test says it holds.
"""

from __future__ import annotations

import io
import struct
import zlib

HEADER = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"
FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"


def stream(data: bytes, extra: bytes = b"", length: int | None = None) -> bytes:
    """A stream object body; `length` overrides the true /Length (for bogus lengths)."""
    n = len(data) if length is None else length
    return b"<< /Length %d %s>>\nstream\n%s\nendstream" % (n, extra, data)


def assemble(
    objects: list[bytes],
    *,
    trailer: bytes = b"/Root 1 0 R",
    size: int | None = None,
    prev_self: bool = False,
) -> bytes:
    """Objects numbered from 1, a classic xref table and a trailer holding `trailer`."""
    out = io.BytesIO()
    out.write(HEADER)
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.writelines(b"%010d 00000 n \n" % offset for offset in offsets)
    size = len(objects) + 1 if size is None else size
    prev = b" /Prev %d" % xref if prev_self else b""
    out.write(b"trailer\n<< /Size %d %s%s >>\n" % (size, trailer, prev))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def text_ops(text: str) -> bytes:
    """A content stream showing `text` in Helvetica."""
    escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"BT /F1 12 Tf 72 720 Td (%s) Tj ET" % escaped.encode("latin-1")


def document(
    contents: list[bytes],
    *,
    page_extra: bytes = b"",
) -> list[bytes]:
    """Objects of a document: 1 catalog, 2 pages, 3 font, then page/content pairs."""
    n = len(contents)
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(n))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n),
        FONT,
    ]
    for i, content in enumerate(contents):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> %s>>" % (5 + 2 * i, page_extra)
        )
        objects.append(stream(content))
    return objects


def simple(texts: list[str], title: str | None = None) -> bytes:
    """A valid document, one page per text."""
    objects = document([text_ops(t) for t in texts])
    if title is None:
        return assemble(objects)
    objects.append(b"<< /Title (%s) /Producer (tests/support/pdfs.py) >>" % title.encode("latin-1"))
    return assemble(objects, trailer=b"/Root 1 0 R /Info %d 0 R" % len(objects))


def padded(text: str, size: int) -> bytes:
    """A valid one-page document showing ``text``, over ``size`` bytes long: an object no
    page uses pads it (for reads that must go past their first chunk)."""
    return assemble([*document([text_ops(text)]), stream(b"0" * size)])


def reportlab_pdf(texts: list[str]) -> bytes:
    """A valid document written by reportlab (a real producer, compressed streams)."""
    from reportlab.pdfgen import canvas

    out = io.BytesIO()
    pdf = canvas.Canvas(out)
    pdf.setTitle("reportlab sample")
    for text in texts:
        for line, chunk in enumerate(text.split("\n")):
            pdf.drawString(72, 720 - 14 * line, chunk)
        pdf.showPage()
    pdf.save()
    return out.getvalue()


# --- not PDFs -------------------------------------------------------------------------------


def html() -> bytes:
    return b"<!DOCTYPE html>\n<html><head><title>upload</title></head><body>%PDF?</body></html>\n"


def png() -> bytes:
    """A real 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0\0"))
        + chunk(b"IEND", b"")
    )


# --- hostile PDFs ---------------------------------------------------------------------------


def flate_bomb_data(size: int = 1 << 30, unit: bytes = b" ") -> bytes:
    """A valid zlib stream of `size` bytes of `unit`, built in a fraction of a second."""
    chunk = unit * (1 << 20)
    compressor = zlib.compressobj(9)
    head = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    body = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    checksum = 1
    for _ in range(size >> 20):
        checksum = zlib.adler32(chunk, checksum)
    # 0x03 0x00: an empty final block; then the Adler-32 of all the data.
    return head + body * ((size >> 20) - 1) + b"\x03\x00" + checksum.to_bytes(4, "big")


def flate_bomb() -> bytes:
    """One page whose 1 MB content stream inflates to 1 GB of spaces."""
    objects = document([b""])
    objects[4] = stream(flate_bomb_data(), b"/Filter /FlateDecode ")
    return assemble(objects)


def nested_filters() -> bytes:
    """Three layers of FlateDecode: a few hundred bytes that inflate to 1 GB."""
    data = flate_bomb_data()
    data = zlib.compress(zlib.compress(data, 9), 9)
    objects = document([b""])
    objects[4] = stream(data, b"/Filter [/FlateDecode /FlateDecode /FlateDecode] ")
    return assemble(objects)


def cpu_bomb(megabytes: int = 40) -> bytes:
    """A content stream of tens of MB of text operators (compressed: the file stays small)."""
    ops = b"BT /F1 12 Tf " + b"1 0 0 1 72 720 Tm (a) Tj " * (megabytes * (1 << 20) // 25) + b"ET"
    objects = document([b""])
    objects[4] = stream(zlib.compress(ops, 6), b"/Filter /FlateDecode ")
    return assemble(objects)


def cpu_long(pages: int = 2000) -> bytes:
    """Pages that all draw one content stream of 256 KB of positioning operators and no text:
    seconds of CPU (about 5 ms a page) at flat memory (under 40 MB), for tests that act on a
    child while it works and must not see it end on its memory limit first."""
    ops = b"BT /F1 12 Tf " + b"1 0 0 1 72 720 Tm " * (256 * 1024 // 18) + b"ET"
    objects = document([b""])
    objects[4] = stream(zlib.compress(ops, 6), b"/Filter /FlateDecode ")
    kids = b" ".join(b"%d 0 R" % (6 + i) for i in range(pages))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages)
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R"
    objects += [page + b" /Resources << /Font << /F1 3 0 R >> >> >>"] * pages
    return assemble(objects)


def cyclic_kids() -> bytes:
    """Two /Pages nodes that list each other as kids."""
    objects = document([text_ops("cycle")])
    objects[1] = b"<< /Type /Pages /Kids [4 0 R 6 0 R] /Count 2 >>"
    objects.append(b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>")  # object 6
    return assemble(objects)


def own_parent() -> bytes:
    """A page that is its own /Parent (and inherits nothing it can find)."""
    objects = document([text_ops("own parent")])
    objects[3] = b"<< /Type /Page /Parent 4 0 R /Contents 5 0 R >>"
    return assemble(objects)


def circular_prev() -> bytes:
    """A trailer whose /Prev points at its own xref table."""
    return assemble(document([text_ops("prev loop")]), prev_self=True)


def aes256_unknown_password() -> bytes:
    """A /V 5 /R 6 (AES-256) encryption dictionary whose password nobody knows."""
    key = bytes(range(48))
    encrypt = (
        b"<< /Filter /Standard /V 5 /R 6 /Length 256 /P -1028 /EncryptMetadata true "
        b"/CF << /StdCF << /CFM /AESV3 /AuthEvent /DocOpen /Length 32 >> >> "
        b"/StmF /StdCF /StrF /StdCF /O <%s> /U <%s> /OE <%s> /UE <%s> /Perms <%s> >>"
        % (
            key.hex().encode(),
            key[::-1].hex().encode(),
            key[:32].hex().encode(),
            key[16:].hex().encode(),
            key[:16].hex().encode(),
        )
    )
    objects = document([b"encrypted bytes"])
    objects.append(encrypt)  # object 6
    ident = b"<0123456789abcdef0123456789abcdef>"
    return assemble(objects, trailer=b"/Root 1 0 R /Encrypt 6 0 R /ID [%s %s]" % (ident, ident))


def self_drawing_form() -> bytes:
    """A Form XObject whose content draws itself."""
    objects = document([b"/Fx Do"], page_extra=b"/XObject << /Fx 6 0 R >> ")
    objects[3] = objects[3].replace(b"/Resources << ", b"/Resources << /XObject << /Fx 6 0 R >> ")
    objects.append(
        stream(
            b"BT /F1 12 Tf (form) Tj ET /Fx Do",
            b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> /XObject << /Fx 6 0 R >> >> ",
        )
    )
    return assemble(objects)


def nested_brackets(depth: int = 200_000) -> bytes:
    """200,000 nested arrays, in the content stream and in the catalog."""
    objects = document([b"[" * depth + b"]" * depth])
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R /Deep %s >>" % (b"[" * depth + b"]" * depth)
    return assemble(objects)


def no_root_huge_size() -> bytes:
    """No /Root, no catalog to recover, and a /Size of two billion objects to search."""
    objects = document([text_ops("no root")])
    objects[0] = b"<< /Type /NotACatalog >>"
    return assemble(objects, trailer=b"", size=2_000_000_000)


def many_pages(count: int = 20_000, declared: int | None = None) -> bytes:
    """`count` pages sharing one small content stream; /Count says `declared` if given."""
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(count))
    declared = count if declared is None else declared
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, declared),
        FONT,
        stream(text_ops("page")),
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 3 0 R >> >> >>"
    )
    objects += [page] * count
    return assemble(objects)


def bogus_length(length: int = 987_654_321) -> bytes:
    """A content stream whose /Length lies (by default: far past the end of the file)."""
    objects = document([text_ops("bogus length")])
    objects[4] = stream(text_ops("bogus length"), length=length)
    return assemble(objects)


def truncated(data: bytes, half: str) -> bytes:
    """The first or the second half of `data`."""
    middle = len(data) // 2
    return data[:middle] if half == "first" else data[middle:]


def many_streams(count: int = 12, megabytes: int = 20) -> bytes:
    """One page made of `count` content streams of `megabytes` MB each: every stream passes
    the decompression caps, together they outgrow a small memory limit."""
    data = flate_bomb_data(megabytes << 20)
    objects = document([b""])
    refs = b" ".join(b"%d 0 R" % (6 + i) for i in range(count))
    objects[3] = objects[3].replace(b"/Contents 5 0 R", b"/Contents [%s]" % refs)
    objects += [stream(data, b"/Filter /FlateDecode ") for _ in range(count)]
    return assemble(objects)


def slow_pdf(tag: str, megabytes: int = 1) -> bytes:
    """About a second of pypdf work per megabyte of text operators; distinct per tag."""
    ops = (
        b"BT /F1 12 Tf (%s) Tj " % tag.encode()
        + b"1 0 0 1 72 720 Tm (a) Tj " * (megabytes * (1 << 20) // 25)
        + b"ET"
    )
    objects = document([b""])
    objects[4] = stream(zlib.compress(ops, 6), b"/Filter /FlateDecode ")
    return assemble(objects)


EMOJI_CMAP = (
    b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Bomb def "
    b"1 begincodespacerange <00> <FF> endcodespacerange "
    b"1 beginbfchar <01> <D83DDCA3> endbfchar "  # code 1 shows U+1F4A3, four bytes of UTF-8
    b"endcmap CMapName currentdict /CMap defineresource pop end end"
)


def text_bomb(chars: int = 16_000_000) -> bytes:
    """A few KB whose one Tj shows `chars` emoji (code 1 mapped by /ToUnicode): 4 bytes of
    UTF-8 each, 64 MB of text from one compressed content stream."""
    ops = b"BT /F1 12 Tf 72 720 Td (" + b"\x01" * chars + b") Tj ET"
    objects = document([b""])
    objects[2] = FONT.replace(b" >>", b" /ToUnicode 6 0 R >>")
    objects[4] = stream(zlib.compress(ops, 9), b"/Filter /FlateDecode ")
    objects.append(stream(EMOJI_CMAP))  # object 6
    return assemble(objects)
