"""Every exception django-pdfpool raises, in one place (imports nothing of the package); the
Redis pool rebuilds exceptions of this module, and only of this module, from JSON."""

from __future__ import annotations


class Wording:
    """What a client is told of each refusal, worded once (``{...}`` filled in where raised);
    ``EXTRACTION_MESSAGES`` words the 422s."""

    # the pools' own (503 busy / closed, 429 caller_busy), both pools alike
    CLOSING = "The service is shutting down and takes no new work."
    STOPPED = "The service was stopped before this job could finish."
    CALLER_BUSY = "You already have a job in progress; wait for it to finish."
    QUEUE_FULL = "Every extraction slot is taken and the queue is full."
    WAITED = "The job waited {limit} for a free extraction slot and was given up."
    # the Redis pool's (503 unavailable, busy, runner_lost)
    UNREACHABLE = "The service cannot reach its coordinator; try again shortly."
    NOT_TAKING = (
        "The service's coordinator does not take new work at the moment; try again shortly."
    )
    DROPPED = "The service lost its coordinator for a moment; try again."
    LOST_WAITING = "The service lost its coordinator while this job waited; try again shortly."
    REBUILDING = "The service is recounting its work after a fault; try again shortly."
    RUNNER_LOST = "The process running this job stopped before it finished; try again."
    EXPIRED = "The job's result expired before it could be read; try again."
    # the sandbox's (503 sandbox_unavailable)
    SANDBOX = "Extraction is unavailable on this server."
    # the upload's (400, 408, 411, 413), from the door and the decorator
    TOO_LARGE = "PDFs up to {size} are accepted."
    TIMED_OUT = "The upload's body did not arrive in time."
    NO_UPLOAD = (
        "Send the PDF as a multipart file field named {field!r}, "
        "or as the request body with Content-Type: application/pdf."
    )
    DIGEST_MISMATCH = "The PDF received does not match the digest its request declared."
    LENGTH_REQUIRED = (
        "A multipart upload needs a Content-Length: send it unchunked, or send the "
        "PDF itself with Content-Type: application/pdf."
    )
    CHUNKED_UNREAD = "This server passes no chunked body on: send the PDF with a Content-Length."
    REPEATED_HEADER = "The {header} header was sent more than once."
    TWO_DIGESTS = "The request declares two different digests for one PDF."
    TWO_SHA256 = "The {header} header declares two different sha-256 values."
    DIGEST_LIST = "The {header} header is not a list of algorithm=:digest: pairs."
    DIGEST_FORM = "The {header} header's sha-256 must be :<base64>: (RFC 9530)."
    DIGEST_BASE64 = "The {header} header's sha-256 is not valid base64."
    DIGEST_LENGTH = "The {header} header's sha-256 is not 32 bytes long."


class Refused(Exception):
    """Base of every refusal: its machine-readable ``code``, its HTTP ``status``, and
    ``retry_after``, the pool's estimate in seconds (at least 1) of when trying again may work."""

    status = 503
    code = "refused"

    def __init__(self, message: str = "", retry_after: float = 1.0) -> None:
        self.retry_after = max(1.0, retry_after)
        super().__init__(message or self.__doc__, self.retry_after)  # cls(*args) rebuilds it

    def __str__(self) -> str:
        return str(self.args[0])


class PoolBusy(Refused):
    """Every slot is taken and the queue is full, or the job waited longer than `wait`."""

    code = "busy"


class CallerBusy(Refused):
    """This caller already has a job in flight."""

    status = 429
    code = "caller_busy"


class PoolClosed(Refused):
    """The pool is draining or stopped and accepts no new work."""

    code = "closed"


class RunnerLost(Refused):
    """The process running or queueing this job is gone (a Redis pool's process stopped
    renewing its lease; no extraction child could be started): trying again runs it anew."""

    code = "runner_lost"


class CoordinatorUnavailable(PoolBusy):
    """Redis cannot be reached and this pool refuses rather than run without the shared limits
    (a PoolBusy: it passes)."""

    code = "unavailable"


class PoolMisconfigured(Refused):
    """This process's pool settings differ from those of the other processes sharing its Redis
    namespace (two deployments would merge): refused until they agree; logged once."""

    code = "misconfigured"


class SandboxUnavailable(Refused):
    """This host gives a job's child fewer sandbox layers than ``PDFPOOL["SANDBOX"]["REQUIRE"]``
    demands: extractions are refused until it does."""

    code = "sandbox_unavailable"


class UploadRejected(Exception):
    """An upload refused for what it is, not for the pool's load: nothing ran for it; the
    message is safe to show a user."""

    status = 400
    code = "bad_upload"


class UploadTooLarge(UploadRejected):
    """The upload is, or says it is, larger than ``MAX_UPLOAD_SIZE``."""

    status = 413
    code = "too_large"

    @classmethod
    def over(cls, max_upload_size: int) -> UploadTooLarge:
        """The 413 for an upload over ``max_upload_size`` bytes, worded once."""
        units = ((1 << 20, "MiB"), (1 << 10, "KiB"), (1, "bytes"))  # the largest said exactly
        exact = [(s, u) for s, u in units if max_upload_size >= s and max_upload_size * 10 % s == 0]
        scale, unit = exact[0] if exact else units[-1]
        return cls(Wording.TOO_LARGE.format(size=f"{max_upload_size / scale:g} {unit}"))


class NoUpload(UploadRejected):
    """The request holds no PDF: no file field of the expected name, no PDF body."""

    code = "no_upload"


class BadDigest(UploadRejected):
    """A digest header that cannot be read as ``sha-256=:<base64>:``."""

    code = "bad_digest"


class RepeatedHeader(UploadRejected):
    """``Content-Type`` or a digest header sent twice: read by neither the door nor Django."""

    code = "repeated_header"


class LengthRequired(UploadRejected):
    """A multipart form sent chunked (Django parses a form only with a ``Content-Length``), or
    any body sent chunked to a WSGI server (Django reads none there)."""

    status = 411
    code = "length_required"


class BodyTimeout(UploadRejected):
    """The body did not arrive in time: the place it held is given back."""

    status = 408
    code = "body_timeout"


class DigestMismatch(UploadRejected):
    """The upload's SHA-256 is not the one its request declared: it neither runs nor joins."""

    code = "digest_mismatch"


class JobFault(RuntimeError):
    """``fn`` raised what would stop the job loop (``SystemExit``, ``KeyboardInterrupt``), or
    was cancelled by anything but the pool's ``stop()``: the job's failure, as any other."""


class BlockingCallWarning(RuntimeWarning):
    """A blocking Redis read (``RedisPool.snapshot()``...) was made on the job loop."""


class RemoteJobError(Exception):
    """A job in another process raised an exception that cannot be rebuilt here."""

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(type_name, message)
        self.type_name = type_name
        self.message = message

    def __str__(self) -> str:
        return f"the job raised {self.type_name}: {self.message}"


class ResultTooLarge(RemoteJobError):
    """The job's outcome is larger than the pool's ``max_result_bytes``: sharers in other
    processes get this instead."""

    def __str__(self) -> str:
        return f"the job's {self.type_name} is too large: {self.message}"


EXTRACTION_MESSAGES = {
    "not_a_pdf": "This file is not a PDF.",
    "encrypted": "This PDF is protected by a password.",
    "malformed": "This PDF is damaged and could not be read.",
    "too_complex": "This PDF took too long to process.",
    "too_large": "This PDF needs more memory than allowed.",
    "too_many_pages": "This PDF has too many pages.",
    "crashed": "This PDF could not be processed.",
}
"""What a user is told of each ``ExtractionError`` code (answered 422)."""


class ExtractionError(Exception):
    """A PDF that could not be extracted: ``message`` is safe to show a user, ``detail`` (for
    logs) never holds a path or a traceback."""

    status = 422

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        detail: str = "",
        elapsed: float | None = None,
        peak_rss: int | None = None,
    ) -> None:
        self.code = code
        self.message = message or EXTRACTION_MESSAGES.get(code, EXTRACTION_MESSAGES["crashed"])
        self.detail = detail
        self.elapsed = elapsed
        self.peak_rss = peak_rss
        super().__init__(code, self.message)  # copy and pickle rebuild it from these

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


__all__ = ["EXTRACTION_MESSAGES", "Wording"] + [  # and every exception above: each is public
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, BaseException)
]
