"""What a project's type checker sees of django-pdfpool: a decorated view keeps its type,
``get_pool()`` is the pools' protocol, and the lazily loaded public names (the package's,
``admission``'s and ``sandbox``'s) are typed."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]

USER_CODE = """
    from django.http import HttpRequest, HttpResponse

    import django_pdfpool
    from django_pdfpool import PdfPoolDoor, get_pool, pdf_pooled
    from django_pdfpool.admission import Pool
    from django_pdfpool.sandbox import PAGE_SEPARATOR


    @pdf_pooled
    def bare(request: HttpRequest) -> HttpResponse:
        return HttpResponse()


    @pdf_pooled(field="document")
    async def configured(request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse()


    reveal_type(bare)
    reveal_type(configured)
    reveal_type(get_pool())
    reveal_type(django_pdfpool.extract)
    reveal_type(PdfPoolDoor)
    reveal_type(Pool(2, 4, 1.0))
    reveal_type(PAGE_SEPARATOR)
"""


def test_a_type_checker_sees_the_public_api_typed(tmp_path):
    module = tmp_path / "user_views.py"
    module.write_text(textwrap.dedent(USER_CODE))
    out, _, _ = mypy_api.run(
        [
            str(module),
            "--strict",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
        ]
    )
    mine = [line for line in out.splitlines() if line.startswith(str(module))]
    assert not [line for line in mine if ": error:" in line], out
    bare, configured, pool, extract, door, local, separator = [
        line.split("Revealed type is ", 1)[1]
        for line in out.splitlines()
        if "Revealed type" in line
    ]
    assert (
        bare
        == '"def (request: django.http.request.HttpRequest) -> django.http.response.HttpResponse"'
    )
    assert "pk: int" in configured and "Coroutine" in configured
    assert pool == '"django_pdfpool.admission.protocol.AdmissionPool"'
    assert extract.endswith('Coroutine[Any, Any, django_pdfpool.sandbox.extract.Extraction]"')
    assert "PdfPoolDoor" in door
    assert local == '"django_pdfpool.admission.local.Pool"'
    assert separator == '"str"'
