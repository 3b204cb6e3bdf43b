"""The report as one document: `reports/index.md`, every table of the active profile and its
figures with the profile, git commit and params hash each came from, then the scorecard of the
three papers, one line per claim of published.yaml.

A claim's verdict is the one its tables wrote: the report stage writes beside each table a card
(`reports/tableN.json`, `table_card`) with its provenance, its figures and its verdicts, and the
index only reads the cards, so a verdict is never decided anew, or differently, here. A claim
whose tables are not built, or not in the profile, is "not computed" and says which.
"""

from __future__ import annotations

import json
from pathlib import Path

from maskbench import paths
from maskbench.config import table_kind
from maskbench.report.published import Rendered, load_published
from maskbench.report.tables import generated_line, provenance
from maskbench.stages import reading


def table_card(config: dict, table: str, rendered: Rendered, figures: Path, root: Path) -> dict:
    """A rendered table's card: its provenance, the figures drawn into `figures`, and its
    verdicts on the claims its kind decides (the text as the table prints it, and its outcome)."""
    return {"table": table, "title": config["tables"][table]["title"], "kind": table_kind(config, table),
            **provenance(config, root), "figures": sorted(p.name for p in figures.glob("*.png")),
            "verdicts": [{"claim": v.claim, "part": v.part, "outcome": v.outcome, "text": v.text}
                         for v in rendered.verdicts]}


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


def render(config: dict, root: Path, links: str = paths.REPORT) -> str:
    """The index's markdown from the cards under `root`; tables are linked at the path pattern
    `links` (the markdown tables, or their HTML pages for the HTML index)."""
    cards = read_cards(config, root)
    lines = [f"# maskbench: every table of profile `{config['profile']}`", "",
             "Each table with the profile, git commit and params hash it was generated from, and its figures. "
             "Below, the scorecard: every claim of the three papers that a table decides, with the verdict the "
             "table wrote (its rule and evidence are in the table).", "",
             "## Tables", "", *table_lines(config, cards, links), "",
             "## Scorecard", "",
             (f"One line per claim (`{paths.PUBLISHED}`): holds, does not hold, mixed, not decided "
              "(by the table's noise rule), not checked (the table lacks the runs the claim compares), or not "
              "computed (and why). A table that does not have the claim's runs is left off a line where another "
              "table checks it."), "",
             *scorecard_lines(config, cards, links), "", generated_line(config, root), ""]
    return "\n".join(lines)


def _link(table: str, links: str) -> str:
    target = Path(links.format(table=table)).relative_to(Path(paths.INDEX).parent)
    return f"[{table}]({target.as_posix()})"


def table_lines(config: dict, cards: dict[str, dict | None], links: str) -> list[str]:
    """One row per table of the profile: provenance and figures, or "not built"."""
    lines = ["| table | title | kind | profile | git commit | params hash | generated | figures |",
             "|---|---|---|---|---|---|---|---|"]
    figures = Path(paths.FIGURES.format(table="{table}")).relative_to(Path(paths.INDEX).parent).as_posix()
    for table, card in cards.items():
        if card is None:
            lines.append(f"| {table} | {config['tables'][table]['title']} | {table_kind(config, table)} | "
                         "not built | — | — | — | — |")
            continue
        drawn = ", ".join(f"[{name}]({figures.format(table=table)}/{name})" for name in card["figures"]) or "none"
        lines.append(f"| {_link(table, links)} | {card['title']} | {card['kind']} | {card['profile']} | "
                     f"`{card['git_commit']}` | `{card['params_hash']}` | {card['generated']} | {drawn} |")
    return lines


def scorecard_lines(config: dict, cards: dict[str, dict | None], links: str) -> list[str]:
    """One line per claim of published.yaml, in its order."""
    return [f"- **{claim['claim']}** ({claim['source']}): {claim_verdicts(config, claim, cards, links)}"
            for claim in load_published()["claims"]]


def claim_verdicts(config: dict, claim: dict, cards: dict[str, dict | None], links: str) -> str:
    """The verdicts the profile's tables of the claim's kind wrote on it, each with its table
    (and row, for a claim decided row by row), or why there is none."""
    kind = claim["decided_by"]
    tables = [t for t in cards if table_kind(config, t) == kind]
    if not tables:
        return f"not computed — no table of kind `{kind}` in profile `{config['profile']}`"
    found = []  # (outcome, line)
    for table in tables:
        card = cards[table]
        if card is None:
            found.append(("not computed", f"not computed — {table} not built in this profile"))
            continue
        verdicts = [v for v in card["verdicts"] if v["claim"] == claim["id"]]
        if not verdicts:
            found.append(("not computed", f"not computed — {_link(table, links)} wrote no verdict on it"))
        found += [(v["outcome"], f"{_link(table, links)}{': ' + v['part'] if v['part'] else ''}: **{v['outcome']}**")
                  for v in verdicts]
    checked = [line for outcome, line in found if outcome != "not checked"]
    return "; ".join(checked or [line for _, line in found])
