"""Where the `paper` profile departs from the papers' recipes (`paper_departures.yaml`), rendered
twice from the one list: as the table of docs/paper-profile.md, and under the paper profile below
each report table it touches, so a table compared with published rows says itself what differs.

    python -m maskbench.report.departures            # rewrite the doc's table in place
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import yaml

from maskbench.io import write_text

DEPARTURES = Path(__file__).with_name("paper_departures.yaml")
FIELDS = ("id", "setting", "here", "papers", "why", "tables", "params")
# the doc's generated block lies between these two lines
BEGIN = ("<!-- departures: generated from src/maskbench/report/paper_departures.yaml "
         "by `python -m maskbench.report.departures` -->")
END = "<!-- end of departures -->"
DOC = Path("docs/paper-profile.md")


@cache
def load_departures() -> tuple[dict, ...]:
    """The list, each entry checked to have exactly FIELDS and a unique id."""
    entries = yaml.safe_load(DEPARTURES.read_text())["departures"]
    seen = set()
    for i, entry in enumerate(entries):
        if set(entry) != set(FIELDS):
            raise ValueError(f"{DEPARTURES}: departures[{i}] has keys {sorted(entry)}; expected {list(FIELDS)}")
        if entry["id"] in seen:
            raise ValueError(f"{DEPARTURES}: departures[{i}]: id {entry['id']!r} is used twice")
        seen.add(entry["id"])
    return tuple(entries)


def doc_table() -> str:
    """The Markdown table docs/paper-profile.md shows, between BEGIN and END."""
    rows = ["| setting | paper profile | the papers | why | tables |", "|---|---|---|---|---|"]
    rows += [f"| {d['setting']} | {d['here']} | {d['papers']} | {d['why']} | {', '.join(d['tables'])} |"
             for d in load_departures()]
    return "\n".join([BEGIN, *rows, END])


def departure_lines(config: dict, table: str) -> list[str]:
    """Under the paper profile, the departures that touch `table`, as the lines its page ends
    with (none under another profile: its stand-ins are named by the datasets' lines)."""
    if config["profile"] != "paper":
        return []
    found = [d for d in load_departures() if table in d["tables"]]
    if not found:
        return []
    return ["", "Where this profile departs from the papers' recipes (docs/paper-profile.md):",
            *(f"- {d['setting']}: here {d['here']}; the papers: {d['papers']}." for d in found)]


def rewrite_doc(doc: Path) -> None:
    """Replace the generated block of `doc` with the current table."""
    text = doc.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{doc}: no generated block (a line {BEGIN!r} and a line {END!r}) to rewrite")
    head, rest = text.split(BEGIN, 1)
    write_text(doc, head + doc_table() + rest.split(END, 1)[1])


if __name__ == "__main__":
    rewrite_doc(Path(sys.argv[1]) if len(sys.argv) > 1 else DOC)
