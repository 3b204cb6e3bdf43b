"""The papers' published numbers beside ours, and a verdict for each of their claims.

`published.yaml` holds the numbers as the papers print them. A table column gets a published
number only when its task's dataset *is* the benchmark the paper measured (the dataset's
`benchmark` in params.yaml) and the paper reports the column's metric; stand-ins get none. A
claim ("ExLM beats MLM on GLUE") is checked on our own rows: the two runs of the table with
the claim's objectives and modality, task by task, over every task of that modality.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml

from maskbench.eval.metrics import higher_is_better

PUBLISHED = Path(__file__).with_name("published.yaml")


@cache
def load_published() -> dict:
    return yaml.safe_load(PUBLISHED.read_text())


def benchmark_of(config: dict, task: str) -> str | None:
    return config["datasets"][config["tasks"][task]["dataset"]].get("benchmark")


def published_rows(config: dict, table: str) -> list[tuple[str, dict, list[str]]]:
    """(citation, row, cells) for every published row with a number in one of the table's columns."""
    tasks = config["tables"][table]["tasks"]
    found = []
    for source in load_published()["sources"].values():
        for row in source["rows"]:
            cells = [_published_cell(row["scores"], benchmark_of(config, t), config["tasks"][t]["metric"]) for t in tasks]
            if any(c != "—" for c in cells):
                found.append((source["citation"], row, cells))
    return found


def _published_cell(scores: dict, benchmark: str | None, metric: str) -> str:
    value = scores.get(benchmark, {}).get(metric) if benchmark else None
    if value is None:
        return "—"
    parts = value if isinstance(value, list) else [value]
    return " / ".join("–" if v is None else f"{v:.1f}" for v in parts)


def verdict(config: dict, table: str, summaries: dict[tuple[str, str], dict], claim: dict) -> str:
    """How the claim fares on this table's rows: holds, does not hold, mixed, or why it cannot be said."""
    runs, spec = config["runs"], config["tables"][table]

    def run_of(objective: str) -> list[str]:
        return [r for r in spec["runs"] if runs[r]["objective"] == objective and runs[r]["modality"] == claim["modality"]]

    better, than = run_of(claim["better"]), run_of(claim["than"])
    if len(better) != 1 or len(than) != 1:
        return (f"not checked: needs one {claim['modality']} run each of `{claim['better']}` and `{claim['than']}` "
                f"in this table (found {better or 'none'} and {than or 'none'})")
    better, than = better[0], than[0]
    tasks = [t for t in spec["tasks"] if config["tasks"][t]["modality"] == claim["modality"]]
    missing = [t for t in tasks if (better, t) not in summaries or (than, t) not in summaries]
    if not tasks or missing:
        return f"not computed: `{better}` vs `{than}` lacks {missing or 'tasks of this modality'}"
    wins = [t for t in tasks if _beats(summaries[(better, t)], summaries[(than, t)])]
    outcome = "holds" if 2 * len(wins) > len(tasks) else "does not hold" if 2 * len(wins) < len(tasks) else "mixed"
    source = load_published()["sources"][claim["measured_in"]]
    measured = {b for row in source["rows"] for b in row["scores"]}
    others = [t for t in tasks if benchmark_of(config, t) not in measured]
    cited = source["citation"].split(" (")[0]
    where = ("" if not others else f" (none of the {len(tasks)} tasks is a benchmark of {cited})" if len(others) == len(tasks)
             else f" ({len(others)} of the {len(tasks)} tasks are not among the benchmarks of {cited})")
    return (f"{outcome}{where}: `{better}` beats `{than}` on {len(wins)} of {len(tasks)} tasks"
            + (f" ({', '.join(wins)})" if wins else ""))


def _beats(ours: dict, theirs: dict) -> bool:
    sign = 1 if higher_is_better(ours["metric"]) else -1
    return sign * (ours["value"] - theirs["value"]) > 0
