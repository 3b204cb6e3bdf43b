"""reports/reference/ holds only current references (reports/reference/references.yaml): every
page there is listed, each current one shows the runs and task columns its profile gives its
table now, a page kept for its noise says so, and the removed ones stay removed."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from maskbench import paths
from maskbench.config import read_yaml, schema_path, validate
from maskbench.report.index import verdict_line
from tests.helpers import REPO

REFERENCE = REPO / "reports/reference"
MANIFEST = yaml.safe_load((REFERENCE / "references.yaml").read_text())


def test_every_reference_page_is_listed_and_no_removed_one_is_back():
    pages = {p.relative_to(REFERENCE).as_posix() for p in REFERENCE.rglob("*.md")}
    assert not set(MANIFEST["current"]) & set(MANIFEST["noise"])
    assert pages == set(MANIFEST["current"]) | set(MANIFEST["noise"]), (
        "list each page under `current` (or `noise`) or remove it (under `removed`)")
    assert not set(MANIFEST["removed"]) & pages
    for removed, entry in MANIFEST["removed"].items():
        assert entry["why"], removed
        # its figures went with it (an index has none of its own)
        assert "figures" not in entry or not (REFERENCE / entry["figures"]).exists(), removed


@pytest.mark.parametrize("page", sorted(MANIFEST["current"]))
def test_a_current_reference_shows_what_its_profile_gives_its_table_now(raw_params, page):
    entry = MANIFEST["current"][page]
    text = (REFERENCE / page).read_text()
    assert f"profile `{entry['profile']}`".lower() in text.lower()
    config = validate(dict(raw_params, profile=entry["profile"]), read_yaml(schema_path()))
    if entry["table"] is None:   # an index: every table of the profile
        for table in config["tables"]:
            assert f"[{table}]" in text or f"| {table} |" in text or f"`{table}`" in text, table
        return
    spec = config["tables"][entry["table"]]
    shown = {run for run in spec["runs"] if re.search(rf"(`{re.escape(run)}`|\| {re.escape(run)} \|)", text)}
    rows = {row for row, given in (spec.get("rows", {}) or {}).items() if given is not None}
    for task in spec["tasks"]:
        assert config["tasks"][task]["label"] in text, (page, task)
    # what the profile added after the page was built, until it is rebuilt: exactly what it lacks
    outstanding = entry.get("outstanding", {"runs": [], "rows": []})
    assert sorted(set(spec["runs"]) - shown) == sorted(outstanding["runs"]), page
    assert sorted(row for row in rows if f"`{row}`" not in text) == sorted(outstanding["rows"]), page


@pytest.mark.parametrize("page", sorted(MANIFEST["noise"]))
def test_a_noise_page_is_a_several_seed_build_and_a_stale_one_says_so_before_any_verdict(page):
    entry = MANIFEST["noise"][page]
    text = (REFERENCE / page).read_text()
    assert f"profile `{entry['profile']}`".lower() in text.lower()
    assert "pretraining seeds" in text
    # a page kept only for its spreads tells a reader who opens it, not the manifest, before any verdict
    stale = "not as a table to reproduce" in " ".join(entry["note"].split())
    assert text.split("\n")[2].startswith("> **Kept for its noise, not a table to reproduce**") == stale, page


@pytest.mark.parametrize("page", sorted(p for p, e in MANIFEST["current"].items()
                                        if p.startswith("grid/") and e["table"] is not None))
def test_a_current_grid_page_has_its_card_and_the_card_says_what_the_page_says(page):
    """`maskbench index` renders the scorecard from the cards alone: a page without its card, or a
    card from another build, would put verdicts in the index that the page does not show."""
    entry = MANIFEST["current"][page]
    card_path = REFERENCE / page.replace(".md", ".json")
    assert card_path.exists(), f"{page}: its card {card_path.name} is missing (copy reports/{card_path.name})"
    card = json.loads(card_path.read_text())
    assert (card["profile"], card["table"]) == (entry["profile"], entry["table"]), page
    text = (REFERENCE / page).read_text()
    assert card["generated"] in text, (page, "the card is from another build than the page")
    for verdict in card["verdicts"]:
        assert verdict["text"] in text, (page, verdict["claim"])


@pytest.mark.parametrize("page", sorted(p for p, e in MANIFEST["current"].items()
                                        if p.startswith("grid/") and e["table"] is None))
def test_a_grid_index_is_the_scorecard_of_the_cards_beside_it(page):
    """The index lists each table with the build its card records, and scores each claim as the
    card's verdict says: an index rendered before a page was rebuilt would disagree with it."""
    text = (REFERENCE / page).read_text()
    cards = sorted((REFERENCE / page).parent.glob("table*.json"))
    assert cards, page
    for card_path in cards:
        card = json.loads(card_path.read_text())
        row = next((line for line in text.splitlines() if line.startswith(f"| [{card['table']}](")), None)
        assert row and card["generated"] in row and card["git_commit"] in row, (page, card["table"])
        for verdict in card["verdicts"]:
            if verdict["outcome"] == "not checked":  # the index names only the tables that check a claim
                continue
            line = verdict_line(card["table"], verdict, paths.REPORT)
            assert line in text, (page, verdict["claim"], line)
