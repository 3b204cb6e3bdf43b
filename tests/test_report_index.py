"""The report as one document: the index lists every table and figure with its provenance, and
its scorecard gives every claim of published.yaml once, with the verdict its tables wrote."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from maskbench import paths
from maskbench.config import table_kind
from maskbench.report.index import read_cards, render, table_card
from maskbench.report.kinds import RENDERERS
from maskbench.report.published import load_published
from maskbench.report.tables import render as render_table1
from maskbench.stages import DamagedFile
from tests.conftest import write_params
from tests.test_report_published import config_for
from tests.test_stages import snakemake_jobs


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
    config = config_for(raw_params, "tiny")
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
    assert line["exlm_beats_mlm_text"].endswith("[table1](table1.md): **not checked**; [table4](table4.md): **not checked**")
    assert line["exlm_states_beat_mlm"].endswith("[table3](table3.md): k = 2, p = 15 %: **not decided**; "
                                                 "[table3](table3.md): k = 4, p = 15 %: **holds**")
    for claim_id in ("equal_corruption_alike", "corruption_extremes_hurt", "entropy_rises_with_corruption"):
        assert line[claim_id].endswith("not computed — table2 not built in this profile")
    assert line["maelm_closes_rank_gap"].endswith("not computed — table6 not built in this profile")


def test_a_claim_whose_kind_has_no_table_in_the_profile_is_not_computed(tmp_path, raw_params):
    config = config_for(raw_params, "tiny")
    config["tables"] = {"table1": config["tables"]["table1"]}
    lines = scorecard(render(config, tmp_path))
    assert any("Performance varies little" in ln and "not computed — no table of kind `repeated_mlm_grid` in "
               "profile `tiny`" in ln for ln in lines)


def test_index_lists_each_table_and_figure_with_its_provenance(tmp_path, raw_params):
    config = config_for(raw_params, "tiny")
    write_card(tmp_path, "table1", card("table1", "objectives", [], figures=["training.png"]))
    text = render(config, tmp_path)
    rows = {ln.split(" | ")[0].lstrip("| "): ln for ln in text.split("## Tables")[1].split("## Scorecard")[0].splitlines()
            if ln.startswith("| ") and not ln.startswith("| table |")}
    assert set(rows) == {"[table1](table1.md)", *(t for t in config["tables"] if t != "table1")}
    assert "`abc1234` | `feed42` | 2026-01-01 00:00 UTC | [training.png](figures/table1/training.png) |" in rows[
        "[table1](table1.md)"]
    assert all("| not built |" in rows[t] for t in config["tables"] if t != "table1")
    assert "[table1](table1.html)" in render(config, tmp_path, paths.REPORT_HTML)  # the HTML index links the pages


def test_a_damaged_card_names_itself_and_the_job_that_rebuilds_it(tmp_path, raw_params):
    config = config_for(raw_params, "tiny")
    path = tmp_path / paths.REPORT_CARD.format(table="table1")
    path.parent.mkdir(parents=True)
    path.write_text('{"table": "table1", "verd')  # cut short
    with pytest.raises(DamagedFile, match=r"reports/table1\.json(.|\n)*maskbench report --table table1"):
        read_cards(config, tmp_path)


def test_a_rendered_table_card_carries_its_verdicts(tmp_path, raw_params):
    """table1's card holds the verdicts table1 prints, one per objectives claim, with their outcomes."""
    config = config_for(raw_params, "tiny")
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


def test_every_claim_is_decided_by_a_kind_of_table():
    assert {c["decided_by"] for c in load_published()["claims"]} <= set(RENDERERS)


@pytest.mark.slow
def test_reports_target_plans_every_table_of_the_profile_and_the_index(workdir, raw_params):
    params = dict(raw_params, profile="smoke")
    write_params(workdir, params)
    jobs = snakemake_jobs(workdir, "reports")
    config = config_for(raw_params, "smoke")
    assert {c for c in jobs if c.startswith("maskbench report ")} == {
        f"maskbench report --table {t}" for t in config["tables"]}
    assert "maskbench index" in jobs
    assert {paths.REPORT.format(table=t) for t in config["tables"]} <= jobs["maskbench index"]["inputs"]


def build_report(workdir: Path, raw_params: dict) -> dict:
    """The smoke profile's tables (from no results: every cell "not computed"), its index and
    `snakemake --report reports/report.html`, built in `workdir`; returns the profile's config."""
    write_params(workdir, dict(raw_params, profile="smoke"))
    config = config_for(raw_params, "smoke")
    for table in config["tables"]:
        subprocess.run(["maskbench", "report", "--table", table], cwd=workdir, check=True, capture_output=True)
    subprocess.run(["maskbench", "index"], cwd=workdir, check=True, capture_output=True)
    subprocess.run(["snakemake", "--report", "reports/report.html", "reports"], cwd=workdir, check=True,
                   capture_output=True)
    return config


@pytest.mark.slow
def test_snakemake_report_gathers_the_index_tables_and_figures(workdir, raw_params):
    """`snakemake --report` on a workdir whose tables and index are built holds the index, each
    table's page and its figures as report items."""
    config = build_report(workdir, raw_params)
    html = (workdir / "reports/report.html").read_text()
    assert Path(paths.INDEX_HTML).name in html
    for table in config["tables"]:
        assert Path(paths.REPORT_HTML.format(table=table)).name in html
    assert "training.png" in html and "Tables" in html and "Figures" in html


def chromium() -> str | None:
    return next((found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
                None)


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None or importlib.util.find_spec("playwright") is None,
                    reason="needs Chromium and playwright (docs/report.md: apt-get install chromium; "
                           "pip install playwright)")
def test_the_report_shows_the_index_each_table_and_a_figure_in_a_browser(workdir, raw_params):
    """Snakemake's report is a JavaScript page: its items exist only once a browser has run it.
    Headless Chromium opens it, and the index, every table and a figure each open from the
    sidebar and show their own content."""
    from playwright.sync_api import sync_playwright

    config = build_report(workdir, raw_params)
    url = (workdir / "reports/report.html").as_uri()
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        page = browser.new_page()

        def open_item(path: list[str], item: str) -> None:
            """Click down the sidebar (a category, then any subcategory) and view `item`."""
            page.goto(url)
            for step in path:
                page.get_by_text(step, exact=True).first.click()
            page.locator("tr", has_text=item).first.locator("a").first.click()
            page.wait_for_timeout(500)

        def shown_text() -> str:
            return "\n".join(frame.inner_text("body") for frame in page.frames)

        open_item(["Index"], "index")
        assert "Scorecard" in shown_text()
        for table in config["tables"]:
            open_item(["Tables"], table)
            assert config["tables"][table]["title"] in shown_text()
        open_item(["Figures", "table1"], "training")                     # table1's training curves
        figure = page.locator('img[src^="data:image/png"]').first
        figure.wait_for(timeout=10_000)
        assert "filename=training.png" in figure.get_attribute("src")[:200]
        browser.close()
