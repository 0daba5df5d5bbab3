"""The admission record: a request's headers read as Django reads them (the digest of RFC 9530,
size, form, expectation), once per request whatever entries it passes, and its caller asked
once."""

from __future__ import annotations

import base64

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from django_pdfpool.exceptions import (
    BadDigest,
    LengthRequired,
    RepeatedHeader,
)
from django_pdfpool.record import UploadHeaders, format_digest, parse_digest
from tests.support.door import headers, sha

pytest_plugins = ["tests.support.redis_fixtures"]


def test_a_digest_is_read_as_rfc_9530_says():
    digest = sha(b"%PDF-1.7")
    assert parse_digest(format_digest(digest)) == digest
    assert (
        parse_digest(f"sha-512=:{base64.b64encode(b'x' * 64).decode()}:, " + format_digest(digest))
        == digest
    )
    assert parse_digest("sha-512=:AAAA:") is None  # only other algorithms: nothing declared
    assert parse_digest("nonsense") is None  # a member without a value: RFC 8941's true
    for bad in ["sha-256=abc", "sha-256=:not base64!:", "sha-256=:AAAA:", "sha-256", "a=1,"]:
        with pytest.raises(BadDigest):
            parse_digest(bad)


def test_a_digest_is_parsed_as_rfc_8941_says():
    """Unpadded base64 taken (parsers should not fail on missing padding), an uppercase key
    refused (not a key), parameters allowed and ignored, sha-256 found among others."""
    digest = sha(b"%PDF-1.7")
    unpadded = format_digest(digest)[:-1].rstrip("=") + ":"
    assert unpadded != format_digest(digest) and parse_digest(unpadded) == digest
    assert parse_digest(format_digest(digest) + ";x=1") == digest
    others = 'md5=:AAAAAAAAAAAAAAAAAAAAAA==:;a="b, c", '
    assert parse_digest(others + format_digest(digest)) == digest
    assert parse_digest("sha-512=(1 2);q, " + format_digest(digest) + "  ") == digest
    with pytest.raises(BadDigest):
        parse_digest(format_digest(digest).replace("sha-256", "SHA-256"))
    with pytest.raises(BadDigest):
        parse_digest("md5=:A:, " + format_digest(digest))  # another member's base64: not sf
    with pytest.raises(RepeatedHeader):  # two headers a server joined: kept a 400
        parse_digest(format_digest(digest) + ", " + format_digest(sha(b"other")))


_SF_ATOMS = st.sampled_from(
    ["sha-256", "SHA-256", "md5", "*k", "=", ":", ";", ",", " ", "\t", "(", ")", '"', "?1",
     "1", "1.5", "-2", "tok/x", "@1", '%"a"', "\\", "x=", "q=1", "a"]
)  # fmt: skip


def _sf_text():
    """Strings near RFC 8941 dictionaries: sha-256 members in bytes of any padding, other
    members and parameters, and the characters their syntax turns on."""
    sizes = st.one_of(st.binary(min_size=32, max_size=32), st.binary(max_size=40))
    payloads = sizes.map(lambda b: base64.b64encode(b).decode())
    trimmed = st.tuples(payloads, st.integers(0, 2)).map(lambda p: p[0][: len(p[0]) - p[1]])
    byteseq = trimmed.map(lambda t: f":{t}:")
    part = st.one_of(_SF_ATOMS, byteseq, byteseq.map(lambda b: f"sha-256={b}"))
    return st.lists(part, max_size=8).map("".join)


@settings(max_examples=3000, deadline=None)
@given(_sf_text())
@example("sha-256,sha-256=:" + "A" * 43 + "=:")  # two members, the first not bytes
def test_the_digest_parser_agrees_with_http_sf(text):
    """Where http-sf (a structured-field parser by one of RFC 8941's authors) reads a
    dictionary, ours reads its sha-256 alike; where it cannot, ours refuses. The one
    difference is ours: two different sha-256 members are refused as repeated headers."""
    http_sf = pytest.importorskip("http_sf")
    try:
        theirs = http_sf.parse(text.encode("latin-1"), tltype="dictionary")
    except Exception:
        theirs = None
    try:
        ours = parse_digest(text)
    except RepeatedHeader:
        return  # http-sf keeps the last member; a server's joined repeat is a 400 here
    except BadDigest:
        ours = "refused"
    if theirs is None:
        assert ours == "refused"
        return
    member = theirs.get("sha-256")
    if member is None:
        assert ours is None
    elif isinstance(member[0], bytes) and len(member[0]) == 32:
        assert ours == member[0].hex()
    else:
        assert ours == "refused"  # a sha-256 that is no 32-byte sequence


def test_the_headers_say_size_form_and_digest():
    digest = sha(b"x")
    raw = headers(
        content_length="12", content_type="application/pdf", repr_digest=format_digest(digest)
    )
    assert (raw.declared_size, raw.raw, raw.digest, raw.chunked) == (12, True, digest, False)
    chunked = headers(
        transfer_encoding="chunked",
        content_type="application/pdf",
        repr_digest=format_digest(digest),
    )
    assert (chunked.declared_size, chunked.chunked) == (None, True)
    assert chunked.digest == digest
    form = headers(content_type="multipart/form-data; boundary=x", pdf_digest=format_digest(digest))
    assert form.digest == digest and not form.raw
    # a raw body's digest is in Repr-Digest or Content-Digest; Pdf-Digest is the form's
    assert headers(content_type="application/pdf", pdf_digest=format_digest(digest)).digest is None
    with pytest.raises(BadDigest):
        headers(
            content_type="application/pdf",
            repr_digest=format_digest(digest),
            content_digest=format_digest(sha(b"y")),
        )


def test_one_reading_of_the_request_as_django_reads_it():
    """A repeated Content-Type or digest header is a 400 (the door and Django would read
    them differently); a Content-Length list of equal values is that value; a chunked
    multipart form is 411 from the headers."""
    pdf, form = ("content-type", "application/pdf"), ("content-type", "multipart/form-data; b=x")
    digest = ("repr-digest", format_digest(sha(b"x")))
    with pytest.raises(RepeatedHeader):
        UploadHeaders.of([form, pdf, digest])
    with pytest.raises(RepeatedHeader):
        UploadHeaders.of([pdf, digest, ("repr-digest", format_digest(sha(b"y")))])
    with pytest.raises(RepeatedHeader):  # the same two, joined by a server (WSGI)
        UploadHeaders.of(
            {
                "content-type": "application/pdf",
                "repr-digest": ",".join([format_digest(sha(b"x")), format_digest(sha(b"y"))]),
            }
        )
    with pytest.raises(RepeatedHeader):  # joined by a WSGI server
        UploadHeaders.of({"content-type": "multipart/form-data; boundary=b,application/pdf"})
    quoted = UploadHeaders.of({"content-type": 'multipart/form-data; boundary="a,b"'})
    assert not quoted.raw  # a comma in a quoted boundary is one header
    assert UploadHeaders.of([pdf, ("content-length", "811, 811")]).declared_size == 811
    assert (
        UploadHeaders.of([pdf, ("content-length", "811"), ("content-length", "811")]).declared_size
        == 811
    )
    assert UploadHeaders.of([pdf, ("content-length", "811, 812")]).declared_size is None
    assert UploadHeaders.of([pdf, ("content-length", "\xb2")]).declared_size is None  # not ASCII
    with pytest.raises(LengthRequired) as chunked:
        UploadHeaders.of([form, ("transfer-encoding", "chunked")])
    assert chunked.value.status == 411
    with pytest.raises(RepeatedHeader):  # Django's own mapping: repeated names keep one
        UploadHeaders.of(
            [("Content-Type", "application/pdf"), ("content-type", "application/pdf; x")]
        )


CALLS: list[str] = []


def counted_caller(request) -> str:
    """A ``CALLER`` that notes each time it is asked."""
    CALLS.append(request.path)
    return "who:counted"


@pytest.fixture
def counted(pdfpool, monkeypatch):
    """Every reading of the headers and every question to ``CALLER``, noted."""
    from django_pdfpool import record

    read = record.UploadHeaders.of.__func__
    parsed: list[object] = []

    def of(cls, headers):
        parsed.append(headers)
        return read(cls, headers)

    monkeypatch.setattr(record.UploadHeaders, "of", classmethod(of))
    CALLS.clear()
    pdfpool(CALLER="tests.test_record.counted_caller")
    return parsed


FIELDS = {"/sync/": "file", "/async/": "document"}  # each view's form field


def _upload(path: str, data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return {FIELDS[path]: SimpleUploadedFile("one.pdf", data, content_type="application/pdf")}


@pytest.mark.parametrize("path", ["/sync/", "/async/"])
def test_each_upload_is_read_once_and_its_caller_asked_once_under_wsgi(counted, path):
    """Through ``AdmissionMiddleware`` (which decides from the record) and ``@pdf_pooled``
    (which reads it): one reading of the headers, one question to ``CALLER``."""
    from django.test import Client

    from tests.support import pdfs

    upload = _upload(path, pdfs.simple([path]))
    response = Client().post(path, upload, HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert len(counted) == 1 and [path] == CALLS


@pytest.mark.parametrize("path", ["/sync/", "/async/"])
def test_each_upload_is_read_once_and_its_caller_asked_once_under_asgi(counted, path):
    """Through ``PdfPoolDoor`` (the record built from the scope), ``AdmissionMiddleware``
    (which sees the door decided) and ``@pdf_pooled``: one reading, one question."""
    import asyncio

    import httpx
    from django.core.asgi import get_asgi_application

    from django_pdfpool import PdfPoolDoor
    from tests.support import pdfs

    app = PdfPoolDoor(get_asgi_application())

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            files = {FIELDS[path]: ("one.pdf", pdfs.simple([path]), "application/pdf")}
            return await client.post(path, files=files, headers={"Accept": "application/json"})

    response = asyncio.run(send())
    assert response.status_code == 200, response.text
    assert len(counted) == 1 and [path] == CALLS


def test_a_content_length_past_the_digits_int_reads_is_no_size_not_a_crash():
    """Django's ``int()`` of it fails as the door's did: the door reads no size and lets
    Django answer, as with the door off."""
    upload = UploadHeaders.of({"content-length": "9" * 5000, "content-type": "application/pdf"})
    assert upload.declared_size is None
