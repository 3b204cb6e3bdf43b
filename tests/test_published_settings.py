"""Every published number sits beside rows of its own setting: each entry of published.yaml
declares the setting it was measured in (`setting`: paper, tables, the knobs that define it), and
under the paper profile every row of ours it is set beside, or compared with by a claim, has
those knobs, unless the entry names the departure that labels the difference on that table."""

from __future__ import annotations

import copy

from maskbench.config import table_kind, table_rows
from maskbench.config.settings import run_settings
from maskbench.report.departures import load_departures
from maskbench.report.published import claim_runs, claims_decided_by, load_published
from tests.helpers import validated

# the published grids each kind of grid table shows (repeated_mlm_grid.py, exlm_grid.py)
GRIDS_OF_KIND = {"repeated_mlm_grid": ("exlm_fig3", "exlm_fig5", "exlm_fig8"), "exlm_grid": ("exlm_table4",)}


def run_values(config: dict, run: str) -> dict:
    """A run's resolved settings, its model size and its knobs (as `knobs.<knob>`)."""
    settings = run_settings(config, run)
    return {**settings, **config["model_sizes"][settings["model"]],
            **{f"knobs.{k}": v for k, v in config["runs"][run].get("knobs", {}).items()}}


def placements(config: dict, published: dict) -> list[tuple[str, dict, str, str]]:
    """(entry, its setting, table, run) for every row of ours an entry's numbers sit beside."""
    found = []
    for table in config["tables"]:
        kind = table_kind(config, table)
        runs = config["tables"][table].get("runs", [])
        if kind == "objectives":
            for claim in claims_decided_by("objectives"):
                source = published["sources"][claim["measured_in"]]
                found += [(f"sources.{claim['measured_in']}", source["setting"], table, run)
                          for side in claim_runs(config, table, claim) for run in side]
        elif kind == "ablations":
            rows = table_rows(config, table)
            for name, source in published["ablations"].items():
                found += [(f"ablations.{name}.{row_id}", source["setting"], table, rows[row_id]["run"])
                          for row_id in source["rows"] if row_id in rows]
        elif kind in GRIDS_OF_KIND:
            arms = [run for run in runs if config["runs"][run]["objective"] != "none"]
            for name in GRIDS_OF_KIND[kind]:
                found += [(f"grids.{name}", published["grids"][name]["setting"], table, run) for run in arms]
        elif kind == "look_around":
            classification, generation = (published["look_around"][part] for part in ("classification", "generation"))
            found += [("look_around.classification", classification["setting"], table, run) for run in runs
                      if config["runs"][run]["objective"] in classification["rows"]]
            found += [("look_around.generation", generation["setting"], table, run) for run in runs
                      if config["runs"][run]["objective"] in ("mlm", "varlen_mlm")]
    return found


def setting_mismatches(config: dict, published: dict) -> list[str]:
    """Each placement whose row lacks a knob of the entry's setting (and no departure on that
    table labels the setting as another), as "entry beside table/run: knob=theirs (here ours)"."""
    departures = {d["id"]: d for d in load_departures()}
    wrong = []
    for entry, setting, table, run in placements(config, published):
        if "departure" in setting:
            if table not in departures[setting["departure"]]["tables"]:
                wrong.append(f"{entry} beside {table}/{run}: departure {setting['departure']} is not on {table}")
            continue
        values = run_values(config, run)
        wrong += [f"{entry} beside {table}/{run}: {key}={want} (here {values.get(key)})"
                  for key, want in setting["knobs"].items() if values.get(key) != want]
    return wrong


def paper(raw_params) -> dict:
    return validated(dict(raw_params, profile="paper"))


def test_every_published_entry_declares_its_setting():
    published = load_published()
    entries = [*published["sources"].values(), *published["ablations"].values(), *published["grids"].values(),
               *published["look_around"].values()]
    for entry in entries:
        assert {"paper", "table", "knobs"} <= set(entry["setting"]), entry["citation"]


def test_no_published_number_sits_beside_a_row_of_another_setting(raw_params):
    config = paper(raw_params)
    assert setting_mismatches(config, load_published()) == []
    # every kind of table that shows published numbers is walked
    assert {table for _, _, table, _ in placements(config, load_published())} == \
        {"table1", "table2", "table3", "table4", "table5", "table7"}


def test_mae_lm_tab2s_mlm_beside_exlms_tab5_mlm_is_caught(raw_params):
    """MAE-LM Tab. 2's "enc. w. [MASK] (i.e., MLM)" 85.2 (post-LN MLM, 125K steps of 2,048) set
    beside `vanilla_mlm`, ExLM's Tab. 5-setting MLM (pre-LN, 50K steps of 4,096), is refused;
    its row is `mae_lm_mlm`, MAE-LM's own MLM."""
    config = paper(raw_params)
    published = copy.deepcopy(load_published())
    assert published["ablations"]["maelm_table2"]["rows"]["mae_lm_mlm"] == {"avg": 85.2}
    published["ablations"]["maelm_table2"]["rows"]["vanilla_mlm"] = {"avg": 85.2}
    wrong = setting_mismatches(config, published)
    assert wrong and all(line.startswith("ablations.maelm_table2.vanilla_mlm beside table5/mlm_p15") for line in wrong)
    assert any("block_norm=post (here pre)" in line for line in wrong)
