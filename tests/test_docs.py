"""The README's commands are the ones CI and users run; the README and the docs site stay readable."""

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from tests.helpers import REPO, smoke_reports_jobs

README = REPO / "README.md"
DOCS = REPO / "docs"
ISSUE_NUMBER = re.compile(r"\bissues? #?\d+|\B#\d+\b", re.I)
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")  # hex with letters and digits
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    return [line for block in blocks[:2] for line in block.splitlines() if line and not line.startswith("#")]


def prose(path: Path) -> str:
    """A page without its fenced code blocks (commands and logs, not text the reader is told)."""
    return re.sub(r"^ *```.*?^ *```", "", path.read_text(), flags=re.S | re.M)


def anchors(path: Path) -> set[str]:
    """The ids MkDocs gives a page's headings (the toc extension's slugify)."""
    return {slugify(m.group(1).strip(), "-") for m in re.finditer(r"^#{1,6} +(.+)$", prose(path), re.M)}


def tables(text: str) -> list[list[str]]:
    """Every Markdown table of a page, its rows with links reduced to their labels (the same table
    links README-relative paths in the README and docs-relative ones in docs/)."""
    found, rows = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            rows.append(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line))
        elif rows:
            found, rows = found + [rows], []
    return found


def test_ci_runs_exactly_the_readme_test_command():
    install_and_run, install_and_test = readme_commands()
    assert "reports/table1.md" in install_and_run
    assert install_and_test.strip() in (REPO / ".ci/run").read_text().splitlines()


def test_the_readme_is_short_and_names_no_issue_or_commit():
    text = README.read_text()
    assert len(text.splitlines()) <= 260, "README.md: keep it to the commands and pointers; move detail to docs/"
    assert not ISSUE_NUMBER.findall(text), "README.md: issue numbers belong in the tracker, not in user docs"
    assert not COMMIT_HASH.findall(text), "README.md: commit hashes belong in the generated reports' provenance"


def test_the_docs_name_no_issue_or_commit():
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        assert not ISSUE_NUMBER.findall(text), f"{page.relative_to(REPO)}: {ISSUE_NUMBER.findall(text)}"
        assert not COMMIT_HASH.findall(text), f"{page.relative_to(REPO)}: {COMMIT_HASH.findall(text)}"


def test_every_relative_link_of_the_readme_reaches_a_file_and_its_heading():
    for target in LINK.findall(prose(README)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        page = README if not path else REPO / path
        assert page.exists(), f"README.md links {target}: {page.relative_to(REPO)} does not exist"
        if anchor and page.suffix == ".md":
            assert anchor in anchors(page), f"README.md links {target}: no heading of {page.name} has that id"


def test_the_readme_tables_are_the_docs_tables():
    """The profile and cost tables (and the papers') are in both: one fact, one wording."""
    docs_tables = [t for page in DOCS.rglob("*.md") for t in tables(page.read_text())]
    for table in tables(prose(README)):
        assert table in docs_tables, f"README.md: the table headed {table[0]!r} differs from docs/ (or is not there)"


def test_every_page_gives_smoke_reports_the_readmes_job_count():
    """`maskbench plan`'s count (the `maskbench` commands), never Snakemake's, one more with the
    `reports` target itself: the README's tables, docs/dvc.md's and docs/timing.md's rows agree."""
    jobs = smoke_reports_jobs()
    table_row = r"^\| `smoke`, `reports` \| (\d+) \|"  # the profile-cost table, in README.md and docs/profiles.md
    rows = {"README.md": table_row, "docs/profiles.md": table_row,
            "docs/timing.md": r"^\| `snakemake --cores (?:all|2) reports` \| `smoke` \| (\d+) \|",
            "docs/dvc.md": r"on `smoke`: (\d+) jobs"}
    for page, row in rows.items():
        found = [int(n) for n in re.findall(row, (REPO / page).read_text(), re.M)]
        assert found and set(found) == {jobs}, f"{page}: smoke's reports in {found} jobs, the README says {jobs}"


def test_the_docs_site_builds_without_a_broken_link(tmp_path):
    """mkdocs.yml is strict and validates links and anchors, so a broken one fails the build."""
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                            "-d", str(tmp_path / "site")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr + build.stdout
    assert (tmp_path / "site/index.html").exists() and (tmp_path / "site/notes/index.html").exists()

    # opened from disk (file://), every link of the index's navigation reaches a page, not a
    # directory listing; and from that page a link back to the index does too
    def links(page: Path) -> list[Path]:
        hrefs = re.findall(r'href="([^"#:]+)(?:#[^"]*)?"', page.read_text())
        return [(page.parent / h).resolve() for h in hrefs if not h.endswith((".css", ".js", ".ico", ".png"))]

    index = tmp_path / "site/index.html"
    pages = [p for p in links(index) if p != index.resolve()]
    assert len(pages) > 10 and all(p.is_file() and p.suffix == ".html" for p in pages), \
        [str(p) for p in pages if not p.is_file()]
    workflow = next(p for p in pages if p.name == "workflow.html")
    assert index.resolve() in links(workflow)


def chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
                None)


@pytest.mark.skipif(chromium() is None or importlib.util.find_spec("playwright") is None,
                    reason="needs Chromium and playwright (docs/report.md)")
def test_the_docs_site_opened_from_disk_searches_and_highlights_offline(tmp_path):
    """In headless Chromium with every request off the disk refused: searching "exp show" lists
    the DVC page, and code is highlighted (no highlight.js from a CDN: no `hljs is not defined`)."""
    from playwright.sync_api import sync_playwright

    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-f", str(REPO / "mkdocs.yml"),
                            "-d", str(tmp_path / "site")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page()
        network, errors = [], []
        page.route(re.compile(r"^https?://"), lambda route: (network.append(route.request.url), route.abort()))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto((tmp_path / "site/dvc.html").as_uri())
        comment = page.locator(".codehilite .c1").first  # a shell comment, in its own colour
        colours = page.evaluate("e => [getComputedStyle(e).color, getComputedStyle(e.closest('pre')).color]",
                                comment.element_handle())
        assert colours[0] != colours[1]
        page.evaluate("""() => { const box = document.getElementById('mkdocs-search-query');
                                 box.value = 'exp show'; box.dispatchEvent(new KeyboardEvent('keyup')); }""")
        found = page.locator("#mkdocs-search-results a").evaluate_all("links => links.map(a => a.href)")
        assert any(href.endswith("/dvc.html") for href in found), found
        assert errors == [] and network == [], (errors, network)
        browser.close()
