"""The report as one document: the index lists every table and figure with its provenance, and
its scorecard gives every claim of published.yaml once, with the verdict its tables wrote."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from maskbench import paths
from maskbench.config import table_kind
from maskbench.eval.metrics import METRICS, metric_label
from maskbench.report.html import to_html
from maskbench.report.index import read_cards, render, report_page, scorecard_counts, table_card
from maskbench.report.items import built_tables, index_page
from maskbench.report.kinds import KINDS
from maskbench.report.objectives import render as render_table1
from maskbench.report.published import Rendered, Verdict, load_published
from maskbench.stages import STAGES
from maskbench.io import DamagedFile
from maskbench.plan import dependencies, job_of, wall_seconds
from tests.helpers import config_with_profile, copy_build, run, smoke_reports_jobs, snakemake_jobs, write_params


def write_card(root, table: str, card: dict) -> None:
    path = root / paths.REPORT_CARD.format(table=table)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(card))


def card(table: str, kind: str, verdicts: list[dict], figures=("training.png",)) -> dict:
    return {"table": table, "title": f"title of {table}", "kind": kind, "profile": "tiny", "git_commit": "abc1234",
            "params_hash": "feed42", "generated": "2026-01-01 00:00 UTC", "figures": list(figures),
            "verdicts": verdicts}


def scorecard(text: str) -> list[str]:
    return text.split("## Scorecard")[1].splitlines()


def test_scorecard_lists_every_claim_once_with_the_verdict_the_table_wrote(tmp_path, raw_params):
    config = config_with_profile(raw_params, "tiny")
    # a verdict no renderer would write for these (empty) results: the index must copy, not decide
    write_card(tmp_path, "table1", card("table1", "objectives", [
        {"claim": "exlm_beats_mlm_smiles", "part": None, "outcome": "mixed", "text": "mixed: on 1 and 1"},
        {"claim": "exlm_beats_mlm_text", "part": None, "outcome": "not checked", "text": "not checked: no runs"}]))
    write_card(tmp_path, "table4", card("table4", "objectives", [
        {"claim": "exlm_beats_mlm_smiles", "part": None, "outcome": "holds", "text": "holds: on 2"},
        {"claim": "exlm_beats_mlm_text", "part": None, "outcome": "not checked", "text": "not checked: no runs"}]))
    write_card(tmp_path, "table3", card("table3", "exlm_grid", [
        {"claim": "exlm_states_beat_mlm", "part": "k = 2, p = 15 %", "outcome": "not decided", "text": "not decided"},
        {"claim": "exlm_states_beat_mlm", "part": "k = 4, p = 15 %", "outcome": "holds", "text": "holds"}]))
    lines = scorecard(render(config, tmp_path))
    claims = load_published()["claims"]
    for claim in claims:
        assert sum(line.startswith(f"- **{claim['claim']}**") for line in lines) == 1, claim["id"]
    assert sum(line.startswith("- **") for line in lines) == len(claims)
    line = {c["id"]: next(ln for ln in lines if ln.startswith(f"- **{c['claim']}**")) for c in claims}
    assert line["exlm_beats_mlm_smiles"].endswith("[table1](table1.md): **mixed**; [table4](table4.md): **holds**")
    # a table without the claim's runs is left off when another checks it, shown when none does
    assert line["exlm_beats_mlm_text"].endswith("[table1](table1.md): **not checked**; [table4](table4.md): **not "
                                                "checked**")
    assert line["exlm_states_beat_mlm"].endswith("[table3](table3.md): k = 2, p = 15 %: **not decided**; "
                                                 "[table3](table3.md): k = 4, p = 15 %: **holds**")
    for claim_id in ("equal_corruption_alike", "corruption_extremes_hurt", "entropy_rises_with_corruption"):
        assert line[claim_id].endswith("not computed — table2 not built yet")
    assert line["maelm_closes_rank_gap"].endswith("not computed — table6 not built yet")


def claim_line(config, root, claim_id: str, links=paths.REPORT) -> str:
    claim = next(c for c in load_published()["claims"] if c["id"] == claim_id)
    return next(ln for ln in scorecard(render(config, root, links)) if ln.startswith(f"- **{claim['claim']}**"))


@pytest.mark.parametrize("outcome", ["holds", "not computed"])
def test_a_claim_a_built_table_checks_names_that_table_only(tmp_path, raw_params, outcome):
    """table1 and table4 both check the SMILES claim; with table1 built alone, its line is
    table1's verdict (or its "not computed", results missing), not "table4 not built"."""
    config = config_with_profile(raw_params, "tiny")
    write_card(tmp_path, "table1", card("table1", "objectives", [
        {"claim": "exlm_beats_mlm_smiles", "part": None, "outcome": outcome, "text": outcome}]))
    line = claim_line(config, tmp_path, "exlm_beats_mlm_smiles")
    assert line.endswith(f": [table1](table1.md): **{outcome}**") and "table4" not in line


def test_a_claim_no_built_table_checks_names_the_tables_not_built(tmp_path, raw_params):
    """table1 without the claim's runs ("not checked") leaves the claim to table4, not built."""
    config = config_with_profile(raw_params, "tiny")
    write_card(tmp_path, "table1", card("table1", "objectives", [
        {"claim": "exlm_beats_mlm_smiles", "part": None, "outcome": "not checked", "text": "not checked"}]))
    assert claim_line(config, tmp_path, "exlm_beats_mlm_smiles").endswith(": not computed — table4 not built yet")


def test_a_claim_whose_kind_has_no_table_in_the_profile_is_not_computed(tmp_path, raw_params):
    config = config_with_profile(raw_params, "tiny")
    config["tables"] = {"table1": config["tables"]["table1"]}
    lines = scorecard(render(config, tmp_path))
    assert any("Performance varies little" in ln and "not computed — no table of kind `repeated_mlm_grid` in "
               "profile `tiny`" in ln for ln in lines)


def test_index_lists_each_table_and_figure_with_its_provenance(tmp_path, raw_params):
    config = config_with_profile(raw_params, "tiny")
    write_card(tmp_path, "table1", card("table1", "objectives", [], figures=["training.png"]))
    text = render(config, tmp_path)
    rows = {ln.split(" | ")[0].lstrip("| "): ln
            for ln in text.split("## Tables")[1].split("## Scorecard")[0].splitlines()
            if ln.startswith("| ") and not ln.startswith("| table |")}
    assert set(rows) == {"[table1](table1.md)", *(t for t in config["tables"] if t != "table1")}
    assert "`abc1234` | `feed42` | 2026-01-01 00:00 UTC | [training.png](figures/table1/training.png) |" in rows[
        "[table1](table1.md)"]
    assert all("| not built |" in rows[t] for t in config["tables"] if t != "table1")
    assert "[table1](table1.html)" in render(config, tmp_path, paths.REPORT_HTML)  # the HTML index links the pages


def test_the_reports_index_page_names_the_tables_and_figures_without_links(tmp_path, raw_params):
    """The report's pages are frames that cannot open one another: its index names them."""
    config = config_with_profile(raw_params, "tiny")
    write_card(tmp_path, "table1", card("table1", "objectives", [
        {"claim": "exlm_beats_mlm_smiles", "part": None, "outcome": "holds", "text": "holds"}]))
    page = report_page(config, tmp_path)
    assert "<a " not in page and "](" not in page
    assert "<td>table1</td>" in page and "<td>training.png</td>" in page and "table1: <strong>holds</strong>" in page
    assert "under <strong>Tables</strong>" in page


def test_a_table_page_carries_the_figures_it_links(tmp_path):
    """A link to a PNG beside the page shows the figure itself: in the report a relative link
    opens a blank pane. A link to a file that is not there stays a link."""
    figure = tmp_path / "figures/table1/training.png"
    figure.parent.mkdir(parents=True)
    figure.write_bytes(b"\x89PNG fake")
    page = to_html("Figures:\n- [training & loss](figures/table1/training.png)\n- [gone](figures/table1/gone.png)\n",
                   "table1", figures_from=tmp_path)
    data = base64.b64encode(b"\x89PNG fake").decode()
    assert f'<img src="data:image/png;base64,{data}" alt="training &amp; loss">' in page
    assert "<figcaption>training &amp; loss</figcaption>" in page and 'href="figures/table1/training.png"' not in page
    assert '<a href="figures/table1/gone.png">gone</a>' in page
    assert "<img" not in to_html("- [training](figures/table1/training.png)\n", "table1")  # no figures_from


def test_the_report_items_are_the_built_tables_and_a_current_index(tmp_path, raw_params):
    """`snakemake --report` takes the tables whose page is built and an index page made from
    the cards, made again only when a card, the reports folder or params.yaml is newer."""
    config = config_with_profile(raw_params, "tiny")
    params = tmp_path / "params.yaml"
    params.write_text("profile: tiny\n")
    assert built_tables(config, tmp_path) == []
    page = index_page(config, tmp_path, params)  # nothing built: every table "not built"
    assert page == tmp_path / paths.REPORT_INDEX_PAGE
    assert page.read_text().count("<td>not built</td>") == len(config["tables"])
    write_card(tmp_path, "table1", card("table1", "objectives", []))  # table1 built: a newer card
    (tmp_path / paths.REPORT_HTML.format(table="table1")).write_text("<html></html>")
    assert built_tables(config, tmp_path) == ["table1"]
    assert "<code>abc1234</code>" in index_page(config, tmp_path, params).read_text()
    os.utime(page, (1, 1))  # older than everything: made again
    index_page(config, tmp_path, params)
    assert page.stat().st_mtime > 1
    made = page.stat().st_mtime_ns
    index_page(config, tmp_path, params)  # up to date: left as it is
    assert page.stat().st_mtime_ns == made


def test_a_damaged_card_names_itself_and_the_job_that_rebuilds_it(tmp_path, raw_params):
    config = config_with_profile(raw_params, "tiny")
    path = tmp_path / paths.REPORT_CARD.format(table="table1")
    path.parent.mkdir(parents=True)
    path.write_text('{"table": "table1", "verd')  # cut short
    with pytest.raises(DamagedFile, match=r"reports/table1\.json(.|\n)*maskbench report --table table1"):
        read_cards(config, tmp_path)


def test_a_rendered_table_card_carries_its_verdicts(tmp_path, raw_params):
    """table1's card holds the verdicts table1 prints, one per objectives claim, with their outcomes."""
    config = config_with_profile(raw_params, "tiny")
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "training.png").write_bytes(b"png")
    rendered = render_table1(config, "table1", tmp_path)
    found = table_card(config, "table1", rendered, figures, tmp_path)
    assert found["figures"] == ["training.png"] and found["kind"] == table_kind(config, "table1")
    assert [v["text"] for v in found["verdicts"]] == [v.text for v in rendered.verdicts]
    assert all(f"Here: {v['text']}." in rendered.markdown for v in found["verdicts"])
    assert {v["outcome"] for v in found["verdicts"]} <= {"not computed", "not checked"}  # no results here
    write_card(tmp_path, "table1", found)
    assert read_cards(config, tmp_path)["table1"] == json.loads(json.dumps(found))


def test_a_claim_of_several_parts_reads_by_part_on_the_scorecard_and_counts_each_part(tmp_path, raw_params):
    """"holds" when one part of two is decided would overstate the claim: the card keeps the
    reading by part, the scorecard shows it, and its counts (DVC's metrics) count parts; a card
    written before parts (no `reading`) still reads and counts as its outcome."""
    config = config_with_profile(raw_params, "tiny")
    text = ("holds on squad_v2; not decided on the mean of 7 tasks: `exlm` − `mlm`, claim on the mean (Holm across "
            "its 2 parts): ...")
    verdicts = [Verdict("exlm_beats_mlm_text", text), Verdict("exlm_beats_mlm_smiles", "not decided: no task left")]
    figures = tmp_path / "figures"
    figures.mkdir()
    found = table_card(config, "table1", Rendered("", verdicts), figures, tmp_path)
    assert [(v["outcome"], v["reading"], v["parts"]) for v in found["verdicts"]] == [
        ("holds", "holds on squad_v2; not decided on the mean of 7 tasks", ["holds", "not decided"]),
        ("not decided", "not decided", ["not decided"])]
    write_card(tmp_path, "table1", found)
    write_card(tmp_path, "table4", card("table4", "objectives", [
        {"claim": "exlm_beats_mlm_smiles", "part": None, "outcome": "holds", "text": "holds: on 2"}]))
    assert "[table1](table1.md): **holds on squad_v2; not decided on the mean of 7 tasks**" in claim_line(
        config, tmp_path, "exlm_beats_mlm_text")
    assert claim_line(config, tmp_path, "exlm_beats_mlm_smiles").endswith(
        "[table1](table1.md): **not decided**; [table4](table4.md): **holds**")
    assert scorecard_counts(config, tmp_path) == {"tables built": 2, "holds": 2, "not decided": 2}
    assert Verdict("c", "mixed — holds on bace; does not hold on esol, hiv (2 of ...): x").parts == [
        "holds", "does not hold", "does not hold"]


def test_every_claim_is_decided_by_a_kind_of_table():
    assert {c["decided_by"] for c in load_published()["claims"]} <= set(KINDS)


@pytest.mark.slow
def test_reports_target_plans_every_table_of_the_profile_and_the_index(workdir, raw_params):
    params = dict(raw_params, profile="smoke")
    write_params(workdir, params)
    jobs = snakemake_jobs(workdir, "reports")
    config = config_with_profile(raw_params, "smoke")
    assert {c for c in jobs if c.startswith("maskbench report ")} == {
        f"maskbench report --table {t}" for t in config["tables"]}
    assert "maskbench index" in jobs
    assert {paths.REPORT.format(table=t) for t in config["tables"]} <= jobs["maskbench index"]["inputs"]
    assert len(jobs) == smoke_reports_jobs(), "the README's job count of smoke's reports"
    # the plan's estimate of this build, from the job times it measured (docs/timing.md: 576 s and
    # 597 s on 2 cores, 2026-11-26), within 1.5x
    planned = [job_of(command) for command in jobs]
    estimates = [STAGES[stage].estimate(config, w) for stage, w in planned]
    wall = wall_seconds(estimates, dependencies(config, planned), 1, 2)
    assert 597 / 1.5 <= wall <= 576 * 1.5, f"smoke's reports estimated at {wall:.0f} s"


def build_report(workdir: Path, raw_params: dict, tables: str) -> tuple[dict, list[str]]:
    """The smoke profile's `tables` (from no results: every cell "not computed"): "table1" alone,
    without the index, or "all" tables and the index; then `snakemake --report
    reports/report.html built`, as the README gives it, in `workdir`. Returns the profile's
    config and the tables built."""
    write_params(workdir, dict(raw_params, profile="smoke"))
    config = config_with_profile(raw_params, "smoke")
    built = ["table1"] if tables == "table1" else list(config["tables"])
    for table in built:
        run(["maskbench", "report", "--table", table], workdir)
    if tables == "all":
        run(["maskbench", "index"], workdir)
    run(["snakemake", "--report", "reports/report.html", "built"], workdir)
    return config, built


@pytest.mark.slow
@pytest.mark.parametrize("tables", ["table1", "all"])
def test_snakemake_report_gathers_the_tables_built_and_an_index(workdir, raw_params, tables):
    """`snakemake --report` after table1 alone, or after every table, holds an index, each
    table built (and no other) and its figures as report items."""
    config, built = build_report(workdir, raw_params, tables)
    html = (workdir / "reports/report.html").read_text()
    assert "index.html" in html and "training.png" in html
    for table in config["tables"]:
        assert (Path(paths.REPORT_HTML.format(table=table)).name in html) == (table in built), table


@pytest.mark.slow
def test_the_report_of_a_built_workspace_warns_of_nothing(smoke_table1, tmp_path):
    """On smoke's table1, built by Snakemake, `snakemake --report reports/report.html built`
    describes only the jobs behind table1: no "Missing metadata" warning for a job of
    params.yaml never run (the default target `all` gives hundreds), and table1 is in it."""
    root = copy_build(smoke_table1, tmp_path / "project")
    log = run(["snakemake", "--report", "reports/report.html", "built"], root)
    assert log.count("Missing metadata") == 0, log[:3000]
    assert "table1.html" in (root / "reports/report.html").read_text()


def chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
                None)


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None or importlib.util.find_spec("playwright") is None,
                    reason="needs Chromium and playwright (docs/report.md: apt-get install chromium; "
                           "pip install playwright)")
@pytest.mark.parametrize("tables", ["table1", "all"])
def test_the_report_opens_every_item_and_link_in_a_browser(workdir, raw_params, tables):
    """Snakemake's report is a JavaScript page: its items exist only once a browser has run it.
    Headless Chromium opens the report made after table1 alone and after every table: the
    landing page's link opens the Index; the index, every table built (its figures drawn in
    it) and a figure each open from the sidebar with their own content; and every link inside
    an item opens something, never a blank pane (each item is a frame of its own, where a
    link to another file of the report opens nothing)."""
    from playwright.sync_api import Error as PlaywrightError, sync_playwright

    config, built = build_report(workdir, raw_params, tables)
    url = (workdir / "reports/report.html").as_uri()
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page()

        def eventually(check, what: str):
            """`check()` once it is truthy, polled for up to 10 s: the report draws an item, and
            a link loads into its frame, some time after the click, longer on a busy CI runner."""
            deadline = time.monotonic() + 10
            while True:
                try:
                    if result := check():
                        return result
                except PlaywrightError:  # a frame detached while it navigated: look again
                    pass
                assert time.monotonic() < deadline, what
                page.wait_for_timeout(100)

        def open_item(path: list[str], item: str) -> None:
            """Click down the sidebar (a category, then any subcategory) and view `item`. The report
            is drawn by React and styled by Tailwind's runtime, both after the page has loaded: on a
            busy runner a click can land while the sidebar is redrawn and be lost (CI once showed
            no item 10 s after it). The report's own state (its global `app`) says whether the view
            changed; the walk is taken again, up to three times, if it did not."""
            for _ in range(3):
                page.goto(url)
                for step in path:
                    page.get_by_text(step, exact=True).first.click()
                page.locator("tr", has_text=item).first.locator("a").first.click()
                try:
                    page.wait_for_function("['html', 'img'].includes(app.state.content)", timeout=10_000)
                    return
                except PlaywrightError:
                    state = page.evaluate("JSON.stringify(app.state)")
            raise AssertionError(f"{item} never showed after three walks down {path}; the report's state: {state}")

        def item_frame():
            frames = eventually(lambda: page.frames[1:], "the item shows in a frame")
            assert len(frames) == 1, "the item shows in one frame"
            frames[0].wait_for_load_state()
            return frames[0]

        def shows_something(frame) -> bool:
            return bool(frame.inner_text("body").strip()) or frame.locator("img").count() > 0

        def follow_every_link(path: list[str], item: str) -> None:
            """Open `item`, click each link in it in turn, and see the pane show something."""
            open_item(path, item)
            for i in range(item_frame().locator("a[href]").count()):
                open_item(path, item)
                item_frame().locator("a[href]").nth(i).click()
                page.wait_for_timeout(500)  # let the pane leave the item it showed before the click
                eventually(lambda: shows_something(item_frame()), f"link {i} of {item} opened a blank pane")

        page.goto(url)  # the landing page's one link, "Start with Index", opens the Index in the sidebar
        landing = page.locator("a[href^='javascript:']")
        assert [landing.nth(i).inner_text() for i in range(landing.count())] == ["Index"]
        landing.first.click()
        page.locator("tr", has_text="index").first.wait_for(timeout=10_000)

        open_item(["Index"], "index")
        index = item_frame().inner_text("body")
        assert "Scorecard" in index and all(table in index for table in config["tables"])
        assert index.count("not built") >= len(config["tables"]) - len(built)
        follow_every_link(["Index"], "index")
        for table in built:
            open_item(["Tables"], table)
            assert config["tables"][table]["title"] in item_frame().inner_text("body")
            assert item_frame().locator('img[src^="data:image/png"]').count() >= 1  # its figures, in the page
            follow_every_link(["Tables"], table)
        open_item(["Figures", "table1"], "training")                     # table1's training curves
        figure = page.locator('img[src^="data:image/png"]').first
        figure.wait_for(timeout=10_000)
        assert "filename=training.png" in figure.get_attribute("src")[:200]

        # each page as a researcher shares it, at 1280 px: its tables wrap rather than overflow,
        # its headers name metrics as the papers do, its prose holds no Python list
        raw_keys = [key for key in METRICS if metric_label(key) != key]
        page.set_viewport_size({"width": 1280, "height": 900})
        index_page = [paths.INDEX_HTML] if tables == "all" else []  # the index page is a target of `reports`
        for html in [*index_page, *(paths.REPORT_HTML.format(table=table) for table in built)]:
            page.goto((workdir / html).as_uri())
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280, f"{html} overflows"
            headers = " ".join(page.locator("th").all_inner_texts())
            assert not [key for key in raw_keys if re.search(rf"\b{key}\b", headers)], html
            assert not re.search(r"\[\s*'", page.inner_text("body")), html
        browser.close()


# The words a browser broke across lines in table cells: a Range per word, more than one line box.
BROKEN_WORDS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll('th, td')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(match[0]);
      }
    }
  }
  return broken;
}"""


@pytest.mark.skipif(chromium() is None or importlib.util.find_spec("playwright") is None,
                    reason="needs Chromium and playwright (docs/report.md)")
def test_report_cells_wrap_at_spaces_and_only_long_identifiers_break(tmp_path):
    """A table as wide as the index's, at 800 px: it does not overflow, no word shorter than 12
    letters is split ("ta|ble" under `overflow-wrap: anywhere`), and a long identifier may be."""
    from playwright.sync_api import sync_playwright

    prose = "the objective of this table wrote no verdict on it although the pretraining ran"
    identifier = "`runs/pretrain/mlm-pseed1/model/model.safetensors-" + "x" * 60 + "`"
    rows = "\n".join(f"| table{i} | {prose} | {identifier} | {prose} |" for i in range(3))
    page_text = to_html(f"| table | claim | file | note |\n|---|---|---|---|\n{rows}\n", "wrapping")
    (tmp_path / "page.html").write_text(page_text)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 800, "height": 900})
        page.goto((tmp_path / "page.html").as_uri())
        assert page.evaluate("document.documentElement.scrollWidth") <= 800
        broken = page.evaluate(BROKEN_WORDS)
        assert broken and all(len(word) >= 12 for word in broken), broken  # the identifier, nothing else
        browser.close()
