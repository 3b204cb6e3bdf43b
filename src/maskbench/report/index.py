"""The report as one document: `reports/index.md`, every table of the active profile and its
figures with the profile, git commit and params hash each came from, then the scorecard of the
three papers, one line per claim of published.yaml.

A claim's verdict is the one its tables wrote: the report stage writes beside each table a card
(`reports/tableN.json`, `table_card`) with its provenance, its figures and its verdicts, and the
index only reads the cards, so a verdict is never decided anew, or differently, here. A claim
whose tables are not built, or not in the profile, is "not computed" and says which.

The same index is the first page of `snakemake --report` (`report_page`), made from the cards
when the report is made, so it exists and is current whichever tables are built. There it names
the tables and figures instead of linking them: the report's pages cannot open one another.
"""

from __future__ import annotations

import json
from pathlib import Path

from maskbench import paths
from maskbench.config import table_kind
from maskbench.io import reading
from maskbench.report import kinds, markdown
from maskbench.report.footer import generated_line, provenance
from maskbench.report.html import to_html
from maskbench.report.published import Rendered, load_published


def table_card(config: dict, table: str, rendered: Rendered, figures: Path, root: Path) -> dict:
    """A rendered table's card: its provenance, the figures drawn into `figures`, and its
    verdicts on the claims its kind decides (the text as the table prints it, and its outcome)."""
    return {"table": table, "title": config["tables"][table]["title"], "kind": table_kind(config, table),
            **provenance(config, root), "figures": sorted(p.name for p in figures.glob("*.png")),
            "verdicts": [{"claim": v.claim, "part": v.part, "outcome": v.outcome, "reading": v.reading,
                          "parts": v.parts, "text": v.text, "context": v.context} for v in rendered.verdicts]}


def read_cards(config: dict, root: Path) -> dict[str, dict | None]:
    """Every table's card under `root`, None for a table not built."""
    found = {}
    for table in config["tables"]:
        path = root / paths.REPORT_CARD.format(table=table)
        if not path.exists():
            found[table] = None
            continue
        with reading(path):  # a damaged card names itself and the job that rebuilds it
            found[table] = json.loads(path.read_text())
    return found


def scorecard_counts(config: dict, root: Path) -> dict[str, int]:
    """The scorecard in numbers: the profile's tables built, and the parts of its tables'
    verdicts on the papers' claims by outcome ("holds", "does not hold", ...; a claim of several
    parts counts each, a card from before parts its verdict once). A handful of numbers that
    `dvc exp show` sets side by side for experiments, one column each."""
    cards = read_cards(config, root)
    outcomes = [o for card in cards.values() if card for v in card["verdicts"] for o in v.get("parts", [v["outcome"]])]
    return {"tables built": sum(card is not None for card in cards.values()),
            **{outcome: outcomes.count(outcome) for outcome in sorted(set(outcomes))}}


def render(config: dict, root: Path, links: str | None = paths.REPORT) -> str:
    """The index's markdown from the cards under `root`; tables are linked at the path pattern
    `links` (the markdown tables, or their HTML pages for the HTML index), or named only, for
    the report's page (`links` None)."""
    cards = read_cards(config, root)
    where = ("" if links else " In this report, open each table under **Tables** in the sidebar, and its figures "
                              "under **Figures**.")
    lines = [f"# maskbench: every table of profile `{config['profile']}`", "",
             "Each table with the profile, git commit and params hash it was generated from, and its figures. "
             "Below, the scorecard: every claim of the three papers that a table decides, with the verdict the "
             f"table wrote (its rule and evidence are in the table).{where}", "",
             "## Tables", "", *table_lines(config, cards, links), "",
             "## Scorecard", "",
             (f"One line per claim (`{paths.PUBLISHED}`): holds, does not hold, mixed, not decided "
              "(by the table's noise rule; a claim of several parts part by part), not checked (the table lacks the "
              "runs the claim compares), or not computed (and why). A claim's line names the built tables that check "
              "it; only where none does, the tables not built yet, which might."), "",
             *scorecard_lines(config, cards, links), "", generated_line(config, root), ""]
    return "\n".join(lines)


def report_page(config: dict, root: Path) -> str:
    """The index as the report's HTML page: the tables and figures named, not linked."""
    return to_html(render(config, root, links=None), "maskbench: the report")


def _link(table: str, links: str | None) -> str:
    if links is None:
        return table
    target = Path(links.format(table=table)).relative_to(Path(paths.INDEX).parent)
    return f"[{table}]({target.as_posix()})"


def _figure(table: str, name: str, links: str | None) -> str:
    if links is None:
        return name
    where = Path(paths.FIGURES.format(table=table)).relative_to(Path(paths.INDEX).parent).as_posix()
    return f"[{name}]({where}/{name})"


def table_lines(config: dict, cards: dict[str, dict | None], links: str | None) -> list[str]:
    """One row per table of the profile: provenance and figures, or "not built"."""
    rows = []
    for table, card in cards.items():
        kind = kinds.label(table_kind(config, table))
        if card is None:
            rows.append([table, config["tables"][table]["title"], kind, "not built", *["—"] * 4])
            continue
        drawn = ", ".join(_figure(table, name, links) for name in card["figures"]) or "none"
        rows.append([_link(table, links), card["title"], kind, card["profile"], f"`{card['git_commit']}`",
                     f"`{card['params_hash']}`", card["generated"], drawn])
    return markdown.table(["table", "title", "kind", "profile", "git commit", "params hash", "generated",
                           "figures"], rows)


def scorecard_lines(config: dict, cards: dict[str, dict | None], links: str | None) -> list[str]:
    """One line per claim of published.yaml, in its order."""
    return [f"- **{claim['claim']}** ({claim['source']}): {claim_verdicts(config, claim, cards, links)}"
            for claim in load_published()["claims"]]


def claim_verdicts(config: dict, claim: dict, cards: dict[str, dict | None], links: str | None) -> str:
    """The verdicts the profile's tables of the claim's kind wrote on it, each with its table
    (and row, for a claim decided row by row), or why there is none. The built tables that
    check it (they have its runs: a verdict, or "not computed" for results not there yet) are
    all its line shows, each with how far below the unigram loss its runs ended (marked
    "barely learned" where one ended less than `verdicts.barely_learned` below); where none does, the tables not built,
    which might; "not checked" (a
    table without the claim's runs) only where that is all there is."""
    kind = claim["decided_by"]
    tables = [t for t in cards if table_kind(config, t) == kind]
    if not tables:
        return f"not computed — no table of kind `{kind}` in profile `{config['profile']}`"
    checks, unbuilt, unchecked = [], [], []
    for table in tables:
        card = cards[table]
        if card is None:
            unbuilt.append(f"not computed — {table} not built yet")
            continue
        verdicts = [v for v in card["verdicts"] if v["claim"] == claim["id"]]
        if not verdicts:
            checks.append(f"not computed — {_link(table, links)} wrote no verdict on it")
        for v in verdicts:
            (unchecked if v["outcome"] == "not checked" else checks).append(verdict_line(table, v, links))
    return "; ".join(checks or unbuilt or unchecked)


def verdict_line(table: str, verdict: dict, links: str | None) -> str:
    """One table's verdict on a claim as the scorecard shows it: the table (linked), the row
    for a claim decided row by row, the outcome (by part, for a claim of several parts), and
    how far its runs learned."""
    part = f": {verdict['part']}" if verdict["part"] else ""
    context = f" (pretraining: {verdict['context']})" if verdict.get("context") else ""
    return f"{_link(table, links)}{part}: **{verdict.get('reading', verdict['outcome'])}**{context}"
