"""Every curl line the demo prints or shows works as printed: the banner of `make demo`
(``ensure_demo_admin``), the upload page's "From a script" box and the README's line for the
demo, each run with the real curl against the example served as `make demo` serves it; the
only change made to a line is the file it names and the demo's address."""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_example import prepare, serve
from tests.support import pdfs

ROOT = Path(__file__).resolve().parents[1]
DEMO = "http://127.0.0.1:8000"  # the address `make demo` serves and the README names

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The example served, and what `ensure_demo_admin` printed for its address."""
    state = tmp_path_factory.mktemp("demo-state")
    prepare(state)
    with serve(state) as server:
        from tests.e2e.test_example import manage

        banner = manage(state, "ensure_demo_admin", "--base-url", server.url)
        assert banner.returncode == 0, banner.stderr
        yield server.url, banner.stdout


def run_curl(line: str, base: str, document: Path) -> tuple[int, dict[str, object]]:
    """``line`` as a shell would split it, its file and the demo's address replaced; the
    HTTP status and the JSON answer."""
    words = shlex.split(line.replace(DEMO, base))
    assert words[0] == "curl", line
    words = [re.sub(r"^file=@\S+$", f"file=@{document}", word) for word in words]
    done = subprocess.run(
        [*words, "--silent", "--write-out", "\n%{http_code}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    body, status = done.stdout.rsplit("\n", 1)
    return int(status), json.loads(body)


@pytest.fixture
def document(tmp_path: Path) -> Path:
    path = tmp_path / "document.pdf"
    path.write_bytes(pdfs.simple(["what the curl line sends"]))
    return path


def assert_extracted(answer: tuple[int, dict[str, object]]) -> None:
    status, found = answer
    assert status == 200, found
    assert found["page_count"] == 1
    assert "what the curl line sends" in str(found["pages"])


def banner_line(banner: str) -> str:
    found = re.search(r"JSON API:\s+(curl .+)$", banner, flags=re.M)
    assert found, banner
    return found[1]


def test_the_banners_curl_line_works_as_printed(demo, document):
    base, banner = demo
    assert_extracted(run_curl(banner_line(banner), base, document))


def test_the_upload_pages_curl_line_works_as_shown(demo, document):
    base, _ = demo
    page = httpx.get(base + "/", timeout=60).text
    box = re.search(r"<h2>From a script</h2>\s*<pre[^>]*><code>(.*?)</code>", page, flags=re.S)
    assert box, "no curl line in the upload page"
    assert_extracted(run_curl(html.unescape(box[1]), base, document))


def test_the_readmes_curl_line_for_the_demo_works(demo, document):
    base, _ = demo
    lines = re.findall(r"`(curl [^`]*127\.0\.0\.1:8000[^`]*)`", (ROOT / "README.md").read_text())
    assert lines, "the README shows no curl line for the demo"
    for line in lines:
        assert_extracted(run_curl(line, base, document))


def test_a_line_without_the_header_is_refused_so_the_test_can_fail(demo, document):
    """The control: the line as it was printed before, without X-Requested-With."""
    base, _ = demo
    status, found = run_curl(f"curl -F file=@document.pdf {base}/api/extract/", base, document)
    assert status == 403 and found["error"] == "header_required"
