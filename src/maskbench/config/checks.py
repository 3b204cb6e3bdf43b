"""Refuse bad parameters before any work: the JSON Schema (types, allowed values, unknown keys)
and the cross-references a schema cannot express (a table naming a run that does not exist, a
grid table without its cells, an ablation row that changes more than its knob). One line per
problem, naming the key and what is allowed.
"""

from __future__ import annotations

import difflib
import math

from pathlib import Path

import jsonschema

from maskbench.config.load import ParamsError, resolve_profile
from maskbench.config.settings import (SEED_MARK, accumulation, add_pretraining_seeds, corpus_datasets, launch_settings,
                                       run_settings)
from maskbench.config.tables import (GRID_OBJECTIVES, differences, grid_arms, grid_cell, mlm_mask_ratio, pretrains,
                                     table_kind, table_rows, varlen_range)
from maskbench.model.schemes import scheme_for
from maskbench.objectives.cards import CARDS, run_card


def _format_error(error: jsonschema.ValidationError, where: str) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        return f"{where}: {key}: {_unknown_keys(error)}"
    return f"{where}: {key}: {error.message}"


def _unknown_keys(error: jsonschema.ValidationError) -> str:
    """Keys the schema does not know, each with the closest it does ("did you mean"): a typo
    (`pretrian`, `lrr`) is named with its fix, not only as "unexpected"."""
    known = list(error.schema.get("properties", {}))
    unknown = [k for k in error.instance if k not in known]
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(str(name), known, n=1)
        parts.append(f"{name!r} is not a known key" + (f" (did you mean {close[0]!r}?)" if close else
                                                       f"; expected one of {sorted(known)}"))
    return "; ".join(parts) or error.message


def with_objectives(schema: dict) -> dict:
    """The schema with what the objectives' cards declare (`maskbench.objectives.cards`): the
    names a run's `objective` may take and the throughput rows a device needs for them. Only the
    mappings on the way to the three are copied: a copy of the whole schema took a tenth of
    each validation."""
    keys = sorted({card.throughput_key for card in CARDS.values()})
    rows = ("properties", "throughput", "additionalProperties", "properties")
    schema = _replaced(schema, ("properties", "runs", "additionalProperties", "properties", "objective", "enum"),
                       sorted(CARDS))
    schema = _replaced(schema, (*rows, "pretrain", "required"), keys)
    return _replaced(schema, (*rows, "pretrain_compiled", "propertyNames"), {"enum": keys})


def _replaced(tree: dict, path: tuple[str, ...], value) -> dict:
    """`tree` with the value at `path` replaced, the mappings on the way copied, the rest shared."""
    return {**tree, path[0]: _replaced(tree[path[0]], path[1:], value) if path[1:] else value}


# Keywords that judge an object by its own keys and each value alone: below a node of only these,
# a value a profile leaves as written is judged as it was in params.yaml as written.
_PER_KEY = {"type", "properties", "additionalProperties", "required", "minProperties", "maxProperties",
            "propertyNames", "description", "title", "$comment", "$schema", "$defs"}


def profile_schema(node, override, merged, root: dict):
    """The schema `node` for a profile's merged parameters `merged`, with every value the
    profile leaves as written (a key not in its `override`) accepted as is: params.yaml as
    written passed the whole schema already, and such a value is the same value under the same
    subschema. So each profile pays for what it changes, not the whole schema again (which
    made `validate` over every profile ~0.8 s a call; a stage, checking its active profile,
    paid ~0.15 s).

    Equivalent only where the subschema does not depend on a sibling's value: below an
    if/then, allOf, oneOf and the like the node is kept whole, and so is everything under it.
    A key the profile adds where additionalProperties is false is left to the node's own
    additionalProperties, so its error (with "did you mean") is the one the full schema gives."""
    ref = node.get("$ref", "") if isinstance(node, dict) else ""
    if ref.startswith("#/") and set(node) <= {"$ref", "description"}:
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        node = target
    if not (isinstance(node, dict) and isinstance(override, dict) and isinstance(merged, dict)
            and set(node) <= _PER_KEY):
        return node
    properties, extra = dict(node.get("properties", {})), node.get("additionalProperties", True)
    for key, value in merged.items():
        declared = key in properties
        if key not in override:
            properties[key] = True
        elif declared or isinstance(extra, dict):
            properties[key] = profile_schema(properties[key] if declared else extra, override[key], value, root)
    return {**node, "properties": properties}


# JSON Schema counts a float without a fraction (30.0, 1e300) as an integer; the settings it
# declares integers are counts (steps, seq_len, seeds), which Python's range() and indexing
# refuse as floats, so an integer is an int here.
_STRICT_INTEGERS = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)))


def _schema_errors(config: dict, schema: dict, where: str) -> list[str]:
    validator = _STRICT_INTEGERS(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    return [_format_error(e, where) for e in _leaf_errors(errors)]


def _beyond_json_errors(tree, where: str, prefix: str = "") -> list[str]:
    """What YAML reads that JSON Schema does not judge: a key that is not a string (`1:`,
    `null:`), which a name's pattern lets pass (patterns judge strings only), and `.nan` or
    `.inf`, numbers to JSON Schema, NaN passing every bound (each comparison with it is false)."""
    children = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    problems = []
    for key, value in children:
        name = f"{prefix}{key}"
        if isinstance(tree, dict) and not isinstance(key, str):
            problems.append(f"{where}: {name}: the key {key!r} is a {type(key).__name__}; expected a name (a string)")
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(f"{where}: {name}: {value} is not a finite number")
        problems += _beyond_json_errors(value, where, f"{name}.")
    return problems


def _leaf_errors(errors):
    """Report the most specific failure of an if/then/allOf instead of its wrapper."""
    for error in errors:
        if error.context:
            yield from _leaf_errors(error.context)
        else:
            yield error


def _reference_errors(config: dict, where: str, positions: list[str]) -> list[str]:
    """Cross-references a JSON Schema cannot express; `positions` are the settings the schema
    allows for `pretrain.positions`."""
    problems = []

    def check(value, allowed, key):
        if value not in allowed:
            problems.append(f"{where}: {key}: {value!r} is not defined; expected one of {sorted(allowed)}")

    datasets, tasks, runs = config["datasets"], config["tasks"], config["runs"]
    for modality in config["corpora"]:
        if modality not in config["tokenizer"]:
            problems.append(f"{where}: tokenizer.{modality}: missing; corpora.{modality} needs a tokenizer to train")
        for name in corpus_datasets(config, modality):
            check(name, [d for d, v in datasets.items() if v["role"] == "corpus" and v["modality"] == modality],
                  f"corpora.{modality}")
    for name, dataset in datasets.items():
        if "benchmark" in dataset and dataset["role"] != "task":
            problems.append(f"{where}: datasets.{name}.benchmark: only task datasets are benchmarks; this one has role "
                            f"{dataset['role']!r}")
        words = dataset.get("word_order", {})
        if words and dataset["format"] != "wikitext_word_order":
            problems.append(f"{where}: datasets.{name}.word_order: only the wikitext_word_order format is generated; "
                            f"this dataset's format is {dataset['format']!r}")
        elif words and words["min_words"] > words["max_words"]:
            problems.append(f"{where}: datasets.{name}.word_order: min_words ({words['min_words']}) is above "
                            f"max_words ({words['max_words']}); no sentence could qualify")
    for name, run in runs.items():
        if SEED_MARK in name:
            problems.append(f"{where}: runs.{name}: a name with {SEED_MARK!r} is kept for pretraining seeds "
                            f"(seed s of run R is R{SEED_MARK}<s>); rename the run")
        check(run["modality"], list(config["corpora"]), f"runs.{name}.modality")
        model = {**config["pretrain"], **run.get("overrides", {})}["model"]
        check(model, list(config["model_sizes"]), f"runs.{name}.overrides.model" if "model" in run.get("overrides", {})
              else "pretrain.model")
        launch = launch_settings(config, name)
        try:
            accumulation(run_settings(config, name), launch["gpus"] * launch["nodes"])
        except ValueError as exc:
            problems.append(f"{where}: runs.{name}: {exc} (launch: gpus {launch['gpus']} x nodes {launch['nodes']})")
        problems += [f"{where}: runs.{name}.knobs: {problem}"
                     for problem in run_card(run).knob_problems(run.get("knobs"))]
        setting = run_settings(config, name)["positions"]
        try:
            scheme_for(run["objective"], run.get("knobs", {}), setting)
        except ValueError:
            rotary = [p for p in positions if "rope" in p.split("+")]
            problems.append(f"{where}: runs.{name}.knobs.rope2d: true is ExLM's 2-D RoPE, which needs RoPE, but "
                            f"positions is {setting!r}; expected positions (pretrain.positions or runs.{name}."
                            f"overrides.positions) one of {rotary}, or rope2d: false")
    for name in config["launch"].get("runs", {}):
        check(name, list(runs), f"launch.runs.{name}")
    for name, task in tasks.items():
        check(task["dataset"],
              [d for d, v in datasets.items() if v["role"] == "task" and v["modality"] == task["modality"]],
              f"tasks.{name}.dataset")
        if "extra_eval_splits" in task and task["split"]["method"] != "predefined":
            problems.append(f"{where}: tasks.{name}.extra_eval_splits: only a dataset's own splits can be scored "
                            f"beside dev; split.method is {task['split']['method']!r}, expected 'predefined'")
    analysis = config["analysis"]
    for modality in config["corpora"]:
        if modality not in analysis["case_study"]:
            problems.append(f"{where}: analysis.case_study.{modality}: missing; ExLM runs on {modality} need an input "
                            "with [MASK] tokens for the case study")
    for modality, task in analysis.get("finetune_task", {}).items():
        check(task, [t for t, v in tasks.items() if v["modality"] == modality], f"analysis.finetune_task.{modality}")
    for name, table in config["tables"].items():
        for i, run in enumerate(table["runs"]):
            check(run, list(runs), f"tables.{name}.runs[{i}]")
        for i, task in enumerate(table["tasks"]):
            check(task, list(tasks), f"tables.{name}.tasks[{i}]")
        if all(run in runs for run in table["runs"]) and table_kind(config, name) in GRID_OBJECTIVES:
            problems += [f"{where}: {problem}" for problem in _grid_errors(config, name)]
        if all(run in runs for run in table["runs"]) and table_kind(config, name) == "ablations":
            problems += [f"{where}: {problem}" for problem in ablation_errors(config, name)]
        if all(run in runs for run in table["runs"]) and table_kind(config, name) == "look_around":
            problems += [f"{where}: {problem}" for problem in _look_around_errors(config, name)]
    for name, size in config["model_sizes"].items():
        if size["n_embd"] % size["n_head"]:
            problems.append(f"{where}: model_sizes.{name}: n_embd={size['n_embd']} is not divisible by "
                            f"n_head={size['n_head']}")
    return problems


def _look_around_errors(config: dict, table: str) -> list[str]:
    """Look Around Tab. 7 decides variable-length MLM against MLM at both ends of its range: a
    look_around table with a varlen_mlm run holds an mlm run at each (docs/tables.md "Table 7: Look Around")."""
    runs = [config["runs"][r] for r in config["tables"][table]["runs"]]
    fixed = sorted({mlm_mask_ratio(r) for r in runs if r["objective"] == "mlm"})
    problems = []
    for name in config["tables"][table]["runs"]:
        run = config["runs"][name]
        if run["objective"] != "varlen_mlm":
            continue
        missing = [r for r in varlen_range(run) if r not in fixed]
        if missing:
            problems.append(f"tables.{table}.runs: variable-length MLM `{name}` draws its mask ratio from "
                            f"{list(varlen_range(run))}; its claim is decided against MLM at both ends, so the table "
                            f"needs an mlm run with knobs.mask_ratio {missing} (its mlm runs have {fixed})")
    return problems


def _grid_errors(config: dict, table: str) -> list[str]:
    """A grid table's arms differ in k and p only: the table's objectives, k and mask_ratio
    spelt out, one run per cell of the declared axes, one modality and the same pretraining
    settings and other knobs throughout (so a cell's score answers for its k and p alone)."""
    spec, runs = config["tables"][table], config["runs"]
    allowed, arms = GRID_OBJECTIVES[table_kind(config, table)], grid_arms(config, table)
    problems, cells = [], {}
    for run in arms:
        where = f"tables.{table}.runs: {run}"
        objective, knobs = runs[run]["objective"], runs[run].get("knobs", {})
        needed = [knob for knob in ("k", "mask_ratio") if knob in run_card(runs[run]).defaults]
        if objective not in allowed:
            problems.append(f"{where} has objective {objective!r}; a {table_kind(config, table)} table holds "
                            f"{' and '.join(allowed)} runs (and the none control)")
        elif any(key not in knobs for key in needed):
            problems.append(f"{where}: a grid arm spells out its knobs {needed} (runs.{run}.knobs)")
        elif grid_cell(runs[run]) in cells:
            problems.append(f"{where} fills the cell (k, p) = {grid_cell(runs[run])} of {cells[grid_cell(runs[run])]}")
        elif (grid_cell(runs[run])[0] not in spec["k"] + [1]) or grid_cell(runs[run])[1] not in spec["p"]:
            problems.append(f"{where}: (k, p) = {grid_cell(runs[run])} is not on the table's axes "
                            f"k {spec['k']} (and 1 for MLM), p {spec['p']}")
        else:
            cells[grid_cell(runs[run])] = run
    if problems or not arms:
        return problems
    first = arms[0]
    for run in arms[1:]:  # every arm against the first: modality and pretraining settings
        differ = [key for key in differences(config, run, first) if key != "objective" and not key.startswith("knobs.")]
        if differ:
            problems.append(f"tables.{table}.runs: {run} differs from {first} in {differ}; a grid's arms differ in k "
                            "and p only (set them alike in runs.<name>.overrides)")
    for objective in allowed:  # arms of one objective against each other: their other knobs too
        same = [r for r in arms if runs[r]["objective"] == objective]
        for run in same[1:]:
            differ = [key for key in differences(config, run, same[0]) if key.startswith("knobs.")
                      and key not in ("knobs.k", "knobs.mask_ratio")]
            if differ:
                problems.append(f"tables.{table}.runs: {run} differs from {same[0]} in {differ} besides k and "
                                "mask_ratio; a grid's arms differ in k and p only")
    case = spec.get("case_study")
    if case is not None and (case not in arms or runs[case]["objective"] != "exlm"):
        problems.append(f"tables.{table}.case_study: {case!r} is not an exlm run of the table; expected one of "
                        f"{[r for r in arms if runs[r]['objective'] == 'exlm']}")
    return problems


def ablation_errors(config: dict, table: str) -> list[str]:
    """An ablations table's rows (`tables.<t>.rows`): each row's run is one of the table's runs,
    every run but the `none` controls has a row, and an ablation differs from the row it
    ablates (`of`, a row without `of`) in no setting but those it names (`changes`), its
    resolved parameters compared, so a row's score answers for its ablated setting alone. (It
    may differ in fewer: a test profile that trains every run a few steps makes MLM++ MLM.)"""
    spec = config["tables"][table]
    rows, problems = table_rows(config, table), []
    shown = {row["run"] for row in rows.values()}
    for run in spec["runs"]:
        if run not in shown and pretrains(config, run):
            problems.append(f"tables.{table}.runs: {run} has no row in tables.{table}.rows")
    for name, row in rows.items():
        where = f"tables.{table}.rows.{name}"
        if row["run"] not in spec["runs"]:
            problems.append(f"{where}.run: {row['run']!r} is not one of tables.{table}.runs")
            continue
        if set(row.get("tasks", [])) - set(spec["tasks"]):
            problems.append(f"{where}.tasks: {sorted(set(row['tasks']) - set(spec['tasks']))} are not tasks of the "
                            f"table; expected some of tables.{table}.tasks {spec['tasks']}")
        if "of" not in row:
            continue
        base = rows.get(row["of"])
        if base is None or "of" in base:
            problems.append(f"{where}.of: {row['of']!r} is not a base row (a row without `of`); expected one of "
                            f"{sorted(r for r, v in rows.items() if 'of' not in v)}")
            continue
        if set(row.get("tasks", spec["tasks"])) - set(base.get("tasks", spec["tasks"])):
            problems.append(f"{where}.tasks: {row.get('tasks', spec['tasks'])} are not among those of row {row['of']} "
                            f"{base.get('tasks', spec['tasks'])}; an ablation is fine-tuned on its base row's tasks "
                            "(or some: the base's other ablations may need more, MAE-LM Fig. 4's SQuAD 2.0)")
        differ = differences(config, row["run"], base["run"])
        if set(differ) - set(row["changes"]):
            problems.append(f"{where}: run {row['run']} differs from {base['run']} (row {row['of']}) in {differ}, "
                            f"but changes names {sorted(row['changes'])}; an ablation changes only what it names")
    return problems


def validate(raw: dict, schema: dict, path: Path | str = "params.yaml", every_profile: bool = True) -> dict:
    """Validate params as written and each profile merged over them (every profile, or only the
    active one); return the active profile's parameters, merged."""
    schema = with_objectives(schema)
    errors = _schema_errors(raw, schema, str(path)) + _beyond_json_errors(raw, str(path))
    if errors:
        raise ParamsError("invalid parameters:\n  " + "\n  ".join(errors))
    profiles = raw.get("profiles", {})
    if raw["profile"] not in profiles:
        raise ParamsError(f"{path}: profile: {raw['profile']!r} is not defined; expected one of {sorted(profiles)}")
    resolved, found = {}, {}
    positions = schema["$defs"]["positions"]["enum"]
    for name in profiles if every_profile else [raw["profile"]]:
        merged = resolve_profile(raw, name)
        changed = profile_schema(schema, {**profiles[name], "profile": name}, merged, schema)
        for problem in _schema_errors(merged, changed, "") or _reference_errors(merged, "", positions):
            found.setdefault(problem, []).append(name)
        resolved[name] = merged
    # a problem of the base parameters shows in every profile: said once, not once per profile
    for problem, names in found.items():
        everywhere = len(names) == len(resolved) > 1
        errors.append(f"{path}{problem}" if everywhere else f"{path} (profile {', '.join(names)}){problem}")
    if errors:
        raise ParamsError("invalid parameters:\n  " + "\n  ".join(errors))
    return add_pretraining_seeds(resolved[raw["profile"]])
