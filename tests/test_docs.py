"""The documentation as a newcomer meets it: the site builds strictly (mkdocs --strict), every
fence and heading of the Markdown survives into the HTML, every link and anchor of the built
site resolves, the code imports only public names (``django_pdfpool.__all__``), the API
reference covers each of them, and the release files (changelog, CONTRIBUTING, the CI
workflow) say what the project really runs."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

import django_pdfpool

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
GENERATED = {"reference.md"}  # mkdocstrings pages: the HTML has more than the Markdown
OPENING = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
HEADING = re.compile(r"^#{1,6}\s+\S")
PYTHON = {"python", "py", "pycon"}


@dataclass
class Block:
    """One fenced code block of a Markdown file."""

    info: str  # what follows the opening fence: the language, then attributes
    body: str
    line: int  # of the opening fence, from 1

    @property
    def language(self) -> str:
        return self.info.split()[0].lower() if self.info.split() else ""

    @property
    def title(self) -> str | None:
        found = re.search(r'title="([^"]*)"', self.info)
        return found.group(1) if found else None


@dataclass
class Fences:
    """The blocks of a file, its headings outside blocks, and what is wrong with its fences."""

    blocks: list[Block] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_fences(text: str) -> Fences:
    """Fenced blocks as CommonMark and Python-Markdown read them: a block ends at a line of
    the same fence character, at least as long, with nothing after it. A fence line with text
    after it inside a block is the classic slip (```` ```Then ... ````): the block runs on and
    swallows what follows, so it is reported."""
    found = Fences()
    lines = text.splitlines()
    open_at: tuple[int, str, str, int] | None = None  # (line, fence, info, indent)
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        if open_at is None:
            match = OPENING.match(line)
            if match:
                open_at = (number, match["fence"], match["info"].strip(), len(match["indent"]))
                body = []
            elif HEADING.match(line):
                found.headings.append(line)
            continue
        start, fence, info, indent = open_at
        stripped = line.strip()
        if set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            found.blocks.append(Block(info, "\n".join(body), start))
            open_at = None
            continue
        if re.match(r"##+ [A-Z`*]", line):
            found.problems.append(f"line {number}: a heading inside the block opened on {start}")
        if stripped.startswith(fence) and stripped.rstrip(fence[0]):
            found.problems.append(
                f"line {number}: a fence followed by text inside the block opened on line "
                f"{start}: {stripped[:40]!r}"
            )
        body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
    if open_at is not None:
        found.problems.append(f"line {open_at[0]}: a fence that is never closed")
    return found


def fences_of(path: Path) -> Fences:
    return read_fences(path.read_text(encoding="utf-8"))


# -- the built site --------------------------------------------------------------------------


class Page(HTMLParser):
    """What the tests need of one built page: its ids, its links, and the article's headings
    and code blocks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.headings = 0
        self.pres = 0
        self.images: list[str] = []
        self._article = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "article":
            self._article += 1
        if tag in {"a", "link"} and values.get("href"):
            self.links.append(values["href"] or "")
        if tag in {"img", "script"} and values.get("src"):
            self.links.append(values["src"] or "")
            if tag == "img" and self._article:
                self.images.append(values["src"] or "")
        if self._article and re.fullmatch(r"h[1-6]", tag):
            self.headings += 1
        if self._article and tag == "pre":
            self.pres += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "article":
            self._article -= 1


def parse_page(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make docs` builds it (strict: a broken link or reference fails)."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def built_page(site: Path, source: Path) -> Path:
    name = source.stem
    return site / "index.html" if name == "index" else site / name / "index.html"


def test_the_site_builds_strictly_with_every_page(site: Path) -> None:
    for source in PAGES:
        assert built_page(site, source).is_file(), f"{source.name} was not built"


@pytest.mark.parametrize("source", PAGES, ids=lambda path: path.name)
def test_every_fence_opens_and_closes_cleanly(source: Path) -> None:
    assert fences_of(source).problems == []


def test_readme_fences_are_clean() -> None:
    assert fences_of(ROOT / "README.md").problems == []


def test_the_fence_check_catches_a_closing_fence_followed_by_text() -> None:
    text = "# A\n\n```python\nx = 1\n```Then more.\n\n## B\n\n```sh\nls\n```\n"
    found = read_fences(text)
    assert found.problems and "followed by text" in found.problems[0]
    assert found.headings == ["# A"]  # "## B" was swallowed, as a renderer would


@pytest.mark.parametrize(
    "source", [p for p in PAGES if p.name not in GENERATED], ids=lambda path: path.name
)
def test_every_block_and_heading_renders_as_written(site: Path, source: Path) -> None:
    """As many code blocks and headings in the HTML as in the Markdown: a fence that swallows
    sections, or a heading lost inside a block, changes the counts."""
    fences = fences_of(source)
    page = parse_page(built_page(site, source))
    assert page.pres == len(fences.blocks), "code blocks in the HTML vs fences in the source"
    assert page.headings == len(fences.headings), "headings in the HTML vs the source"


def _target(site: Path, page: Path, link: str) -> tuple[Path, str] | None:
    """The file and fragment a relative link of ``page`` points to; None for other sites."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
        return None
    if parts.path.startswith("/"):
        return site / "ABSOLUTE-LINK" / parts.path.lstrip("/"), ""  # never relocatable
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    if target.is_dir() or parts.path.endswith("/"):
        target = target / "index.html"
    return target, unquote(parts.fragment)


def test_every_link_and_anchor_of_the_site_resolves(site: Path) -> None:
    """Links between pages, to headings, to images and assets, in the nav and in the API
    reference: each file exists and each #fragment is an id on its page."""
    pages = {path: parse_page(path) for path in site.rglob("*.html") if path.name != "404.html"}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            target = _target(site, path, link)
            if target is None:
                continue
            file, fragment = target
            if not file.is_file():
                broken.append(f"{path.relative_to(site)}: {link}")
            elif fragment and file.suffix == ".html":
                ids = pages[file].ids if file in pages else parse_page(file).ids
                if fragment not in ids:
                    broken.append(f"{path.relative_to(site)}: {link} (no such anchor)")
    assert broken == []


def test_the_readme_links_resolve() -> None:
    for link in re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text()):
        if urlsplit(link).scheme:
            continue
        assert (ROOT / urlsplit(link).path).exists(), link


def test_the_screenshots_are_in_the_site(site: Path) -> None:
    shown = set()
    for source in PAGES:
        for src in parse_page(built_page(site, source)).images:
            shown.add(Path(urlsplit(src).path).name)
    for image in (DOCS / "images").iterdir():
        assert image.name in shown, f"{image.name} is on no page"
        assert (site / "images" / image.name).is_file()


# -- the code in the docs --------------------------------------------------------------------


def python_blocks() -> list[tuple[str, Block]]:
    found = []
    for source in [*PAGES, ROOT / "README.md"]:
        for block in fences_of(source).blocks:
            if block.language in PYTHON:
                found.append((f"{source.name}:{block.line}", block))
    return found


def _tree(block: Block) -> ast.Module:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    return compile(block.body, "<docs>", "exec", flags=flags, dont_inherit=True)  # type: ignore[no-any-return]


@pytest.mark.parametrize("where,block", python_blocks(), ids=lambda value: str(value)[:40])
def test_python_in_the_docs_parses(where: str, block: Block) -> None:
    _tree(block)


# names a block takes from its page's prose or from the file it is added to (startproject's)
SUPPLIED = {"INSTALLED_APPS", "BASE_DIR", "document", "pdf_bytes", "path_or_bytes"}


def undefined_names(code: str) -> set[str]:
    """The names ``code`` uses and never defines or imports (ruff's F821)."""
    ruff = [sys.executable, "-m", "ruff", "check", "--select", "F821", "--output-format", "json"]
    found = subprocess.run([*ruff, "--stdin-filename", "block.py", "-"], input=code,
                           capture_output=True, text=True, check=False)  # fmt: skip
    return {re.findall(r"`(.+)`", f["message"])[0] for f in json.loads(found.stdout)}


@pytest.mark.parametrize("where,block", python_blocks(), ids=lambda value: str(value)[:40])
def test_python_in_the_docs_imports_what_it_uses(where: str, block: Block) -> None:
    assert undefined_names(block.body) <= SUPPLIED


def test_the_name_check_catches_a_missing_import() -> None:
    assert undefined_names("def view(request):\n    return render(request, 'x')\n") == {"render"}


# the modules besides the package that users import from, each with its own ``__all__``
# (docs/reference.md): exceptions, answers, pools, sandbox controls and the integrations
PUBLIC_MODULES = (
    "django_pdfpool.exceptions",
    "django_pdfpool.responses",
    "django_pdfpool.admission",
    "django_pdfpool.sandbox",
    "django_pdfpool.contrib.drf",
    "django_pdfpool.contrib.ninja",
    "django_pdfpool.contrib.celery",
)


def public_names(module: str) -> set[str]:
    if module == "django_pdfpool":
        return set(django_pdfpool.__all__) | {"__version__"}
    return set(importlib.import_module(module).__all__)


def private_uses(tree: ast.AST) -> list[str]:
    """Imports of django_pdfpool's submodules (but the public ones) or of names outside
    their ``__all__``, and ``django_pdfpool.<name>`` attribute paths outside it."""
    public = public_names("django_pdfpool")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django_pdfpool"):
            module = node.module or ""
            if module != "django_pdfpool" and module not in PUBLIC_MODULES:
                found.append(f"from {node.module} import ...")
                continue
            names = public_names(module)
            found += [alias.name for alias in node.names if alias.name not in names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("django_pdfpool.")]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "django_pdfpool"
            and node.attr not in public
        ):
            found.append(f"django_pdfpool.{node.attr}")
    return found


@pytest.mark.parametrize("where,block", python_blocks(), ids=lambda value: str(value)[:40])
def test_the_docs_import_only_public_names(where: str, block: Block) -> None:
    assert private_uses(_tree(block)) == []


def test_the_import_check_catches_a_submodule_and_a_private_name() -> None:
    code = "from django_pdfpool.conf import get_settings\nfrom django_pdfpool import _HOMES\n"
    code += "import django_pdfpool.configured\ndjango_pdfpool.conf.get_settings()\n"
    code += "from django_pdfpool.exceptions import PoolBusy\nfrom django_pdfpool import PoolBusy\n"
    assert len(private_uses(ast.parse(code))) == 5


# -- the API reference -----------------------------------------------------------------------


def test_the_api_reference_covers_every_public_name(site: Path) -> None:
    written = (DOCS / "reference.md").read_text()
    page = parse_page(site / "reference" / "index.html")
    for name in django_pdfpool.__all__:
        assert f"::: django_pdfpool.{name}\n" in written, name
        assert f"django_pdfpool.{name}" in page.ids, f"{name} has no entry in the built page"
    for module in PUBLIC_MODULES:
        for name in public_names(module):
            assert f"::: {module}.{name}\n" in written, f"{module}.{name}"
            assert f"{module}.{name}" in page.ids, f"{module}.{name} has no entry"


@pytest.mark.parametrize("name", django_pdfpool.__all__)
def test_every_public_name_has_a_docstring(name: str) -> None:
    assert inspect.getdoc(getattr(django_pdfpool, name)), name


# -- release files ---------------------------------------------------------------------------

CHANGE_KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_changelog_is_in_keep_a_changelog_form() -> None:
    lines = (DOCS / "changelog.md").read_text().splitlines()
    assert lines[0] == "# Changelog"
    versions = [line for line in lines if line.startswith("## ")]
    assert versions[0] == "## [Unreleased]"
    for version in versions[1:]:
        assert re.fullmatch(r"## \[\d+\.\d+\.\d+\w*\] - \d{4}-\d{2}-\d{2}", version), version
    kinds = [line[4:] for line in lines if line.startswith("### ")]
    assert kinds and set(kinds) <= CHANGE_KINDS, kinds
    text = "\n".join(lines)
    for section in re.split(r"^### .*$", text, flags=re.M)[1:]:
        body = section.split("\n## ")[0]
        assert re.search(r"^- \S", body, flags=re.M), "a change kind without entries"


def _make_targets() -> list[str]:
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), flags=re.M)
    assert phony is not None
    return phony.group(1).split()


def test_contributing_names_every_make_target() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    missing = [t for t in _make_targets() if not re.search(rf"make {re.escape(t)}\b", text)]
    assert missing == []


def test_security_policy_says_how_to_report() -> None:
    text = (ROOT / "SECURITY.md").read_text()
    assert re.search(r"^## Reporting", text, flags=re.M)


def test_the_ci_workflow_is_valid_yaml_running_the_make_targets() -> None:
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"push", "pull_request"} <= set(triggers)
    runs = []
    for job in workflow["jobs"].values():
        assert job["runs-on"]
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:
                assert re.search(r"@v\d+$", step["uses"]), step["uses"]
            else:
                runs += [line.strip() for line in step["run"].splitlines()]
    assert "make test" in runs
    assert "make test-matrix" in runs
    targets = _make_targets()
    for line in runs:
        if line.startswith("make "):
            assert line.split()[1] in targets, line


# -- the settings page -------------------------------------------------------------------


def _settings_tables():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        return importlib.import_module("settings_tables")
    finally:
        sys.path.remove(str(ROOT / "tools"))


def test_the_settings_tables_in_the_repository_match_the_declaration():
    """docs/settings.md as read in the repository: `python tools/settings_tables.py` wrote it
    from django_pdfpool.conf; a key, default, check or help changed since is a failure."""
    tables = _settings_tables()
    written = (DOCS / "settings.md").read_text(encoding="utf-8")
    assert written.count("<!-- /settings -->") == 4  # PDFPOOL, DOOR, REDIS, SANDBOX
    assert tables.render(written) == written, "run: python tools/settings_tables.py"


def test_every_key_has_a_row_and_the_check_catches_a_stale_one():
    from django_pdfpool.conf import SETTINGS

    tables = _settings_tables()
    written = (DOCS / "settings.md").read_text(encoding="utf-8")
    for key in SETTINGS:
        assert f"| `{key}` |" in written, key
    stale = written.replace("| `SLOTS` | `2` |", "| `SLOTS` | `3` |")
    assert tables.render(stale) != stale


def test_each_row_says_the_check_and_the_help_and_defaults_read_as_written():
    from django_pdfpool.conf import SETTINGS, table_of

    tables = _settings_tables()
    names = {"PDFPOOL": SETTINGS} | {k: table_of(d.group) for k, d in SETTINGS.items() if d.group}
    for name, table in names.items():
        rows = tables.settings_table(name).splitlines()
        for key, declared in table.items():
            (row,) = [line for line in rows if line.startswith(f"| `{key}` |")]
            assert f"| {declared.check.expected} | {declared.help} |" in row, key
    written = "\n".join(map(tables.settings_table, names))
    assert '| `ENGINE` | `"pypdf"` |' in written and "| `MEMORY_LIMIT` | 512 MiB |" in written
    assert "| `MAX_PAGES` | `None` |" in written and "| `BUDGET_BYTES` | 64 MiB |" in written
    with pytest.raises(ValueError):
        tables.settings_table("nowhere")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert any("settings.md" in str(entry) for entry in config["nav"])
