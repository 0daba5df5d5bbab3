"""``door.django.TimedStream``: a WSGI body read against its ticket's deadline. Each read
(``read`` and ``readline`` alike) counts its bytes, and the bytes earn time
(``BODY_MIN_RATE``): a body that keeps coming may outlast ``BODY_TIMEOUT``; one that
stops gets 408 and its place back."""

from __future__ import annotations

import io

import pytest

from django_pdfpool.door.django import TimedStream
from django_pdfpool.door.rules import Arrivals, Terms
from django_pdfpool.exceptions import BodyTimeout

TERMS = Terms(
    max_upload_size=10_000, budget=1, budget_bytes=10_000, body_timeout=0.5, body_min_rate=100
)


def test_every_read_counts_its_bytes_and_the_bytes_earn_time():
    arrivals = Arrivals()
    ticket = arrivals.place(1, "ip:10.8.0.1", None)
    assert ticket is not None
    stream = TimedStream(io.BytesIO(b"line\n" + b"x" * 995), ticket, TERMS)
    assert stream.readline() == b"line\n"
    assert stream.read(595) == b"x" * 595
    assert ticket.received == 600  # 6 s earned at 100 bytes a second
    ticket.started -= 2.0  # two seconds on, past BODY_TIMEOUT (0.5 s) but not past 6.5 s
    assert stream.read() == b"x" * 400  # still in time: the bytes so far earned it
    assert ticket.received == 1000 and not ticket.released


def test_a_body_past_its_deadline_gets_408_and_gives_its_place_back():
    arrivals = Arrivals()
    ticket = arrivals.place(1, "ip:10.8.0.2", None)
    assert ticket is not None
    stream = TimedStream(io.BytesIO(b"x" * 1000), ticket, TERMS)
    assert stream.read(10) == b"x" * 10  # 0.1 s earned
    ticket.started -= 1.0  # past 0.5 + 0.1 s
    with pytest.raises(BodyTimeout):
        stream.readline()
    assert ticket.released and arrivals.timed_out == 1
    assert arrivals.place(1, "ip:10.8.0.3", None) is not None  # the place is free again
