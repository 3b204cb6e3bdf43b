"""Load params.yaml, merge the active profile over it, and refuse bad values before any work.

Every stage and the Snakefile read parameters through `load_params`, so a wrong key, type or
value fails the same way everywhere: one line per problem naming the key and what is allowed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path

import jsonschema
import yaml

from maskbench import paths


class ParamsError(ValueError):
    """params.yaml is invalid; the message names every offending key."""


def deep_merge(base: dict, override: dict) -> dict:
    """`override` wins; nested dicts merge key by key, everything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def read_yaml(path: Path) -> dict:
    try:
        with open(path) as fh:  # a file, not its text: YAML errors then name it, with line and column
            data = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def schema_path() -> Path:
    """The schema of the code that reads the parameters, wherever the params file is: in the
    checkout this package is imported from (src/maskbench/ two levels below workflow/), else,
    for a copy of the package installed elsewhere, in the workflow of the working directory."""
    places = [Path(__file__).resolve().parents[2] / paths.SCHEMA, Path.cwd() / paths.SCHEMA]
    found = next((path for path in places if path.is_file()), None)
    if found is None:
        raise ParamsError(f"the params schema is not at {places[0]} (beside the maskbench package) nor at {places[1]} "
                          "(the working directory): install maskbench from its checkout (pip install -e .), or run "
                          "from the checkout's root")
    return found


def _format_error(error: jsonschema.ValidationError, where: str) -> str:
    key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
    return f"{where}: {key}: {error.message}"


def _schema_errors(config: dict, schema: dict, where: str) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    return [_format_error(e, where) for e in _leaf_errors(errors)]


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
        check(model, list(config["model_sizes"]), f"runs.{name}.overrides.model" if "model" in run.get("overrides", {}) else "pretrain.model")
        launch = launch_settings(config, name)
        try:
            accumulation(run_settings(config, name), launch["gpus"] * launch["nodes"])
        except ValueError as exc:
            problems.append(f"{where}: runs.{name}: {exc} (launch: gpus {launch['gpus']} x nodes {launch['nodes']})")
        setting = run_settings(config, name)["positions"]
        try:
            scheme_for(run, setting)
        except ValueError:
            rotary = [p for p in positions if "rope" in p.split("+")]
            problems.append(f"{where}: runs.{name}.knobs.rope2d: true is ExLM's 2-D RoPE, which needs RoPE, but "
                            f"positions is {setting!r}; expected positions (pretrain.positions or runs.{name}."
                            f"overrides.positions) one of {rotary}, or rope2d: false")
    for name in config["launch"].get("runs", {}):
        check(name, list(runs), f"launch.runs.{name}")
    for name, task in tasks.items():
        check(task["dataset"], [d for d, v in datasets.items() if v["role"] == "task" and v["modality"] == task["modality"]],
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
            problems.append(f"{where}: model_sizes.{name}: n_embd={size['n_embd']} is not divisible by n_head={size['n_head']}")
    return problems


def mlm_mask_ratio(run: dict) -> float:
    """An MLM run's mask ratio (`knobs.mask_ratio`; MLM's own default 0.15 where left out)."""
    return run.get("knobs", {}).get("mask_ratio", 0.15)


def varlen_range(run: dict) -> tuple[float, float]:
    """A variable-length MLM run's mask-ratio range (its knobs; the objective's [0.15, 0.3] default)."""
    knobs = run.get("knobs", {})
    return knobs.get("mask_ratio_min", 0.15), knobs.get("mask_ratio_max", 0.3)


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


# The objectives whose runs fill each grid table's (k, p) cells (MLM is the k = 1 cell).
GRID_OBJECTIVES = {"repeated_mlm_grid": ("mlm", "repeated_mlm"), "exlm_grid": ("mlm", "exlm")}


def rank_tables(config: dict) -> list[str]:
    """The tables that show effective ranks (kind `effective_rank`, table6)."""
    return [t for t in config["tables"] if table_kind(config, t) == "effective_rank"]


def analysis_finetune_task(config: dict, run: str) -> str | None:
    """The task the analysis of `run` fine-tunes on to measure the rank after fine-tuning
    (MAE-LM Fig. 5b; `analysis.finetune_task` of its modality), or None: only runs that a rank
    table shows pay for that extra fine-tuning."""
    if not any(run in config["tables"][t]["runs"] for t in rank_tables(config)):
        return None
    return config["analysis"].get("finetune_task", {}).get(config["runs"][run]["modality"])


def table_kind(config: dict, table: str) -> str:
    """How a table is laid out (`tables.<name>.kind`; table1's runs x tasks by default)."""
    return config["tables"][table].get("kind", "objectives")


def grid_cell(run: dict) -> tuple[int, float]:
    """The (k, p) of a grid arm: its knobs `k` (1 for MLM) and `mask_ratio`."""
    knobs = run.get("knobs", {})
    return (1 if run["objective"] == "mlm" else knobs["k"]), knobs["mask_ratio"]


def grid_arms(config: dict, table: str) -> list[str]:
    """The runs of a grid table that fill its cells: all but the `none` control."""
    return [r for r in config["tables"][table]["runs"] if config["runs"][r]["objective"] != "none"]


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
        needed = ["mask_ratio"] if objective == "mlm" else ["k", "mask_ratio"]
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


def resolved_run(config: dict, run: str) -> dict:
    """Everything that decides what a run learns, flat: modality, objective, each knob as
    `knobs.<knob>` and each pretraining setting (shared, then the run's overrides)."""
    spec = config["runs"][run]
    return {"modality": spec["modality"], "objective": spec["objective"],
            **{f"knobs.{k}": v for k, v in spec.get("knobs", {}).items()}, **run_settings(config, run)}


def differences(config: dict, run: str, base: str) -> list[str]:
    """The keys of `resolved_run` in which `run` and `base` differ."""
    a, b = resolved_run(config, run), resolved_run(config, base)
    return sorted(key for key in {**a, **b} if a.get(key) != b.get(key))


def table_rows(config: dict, table: str) -> dict[str, dict]:
    """An ablations table's rows by id, in order (a row a profile set to null left out)."""
    return {name: row for name, row in config["tables"][table]["rows"].items() if row is not None}


def ablation_errors(config: dict, table: str) -> list[str]:
    """An ablations table's rows (`tables.<t>.rows`): each row's run is one of the table's runs,
    every run but the `none` controls has a row, and an ablation differs from the row it
    ablates (`of`, a row without `of`) in no setting but those it names (`changes`), its
    resolved parameters compared, so a row's score answers for its ablated setting alone. (It
    may differ in fewer: a test profile that trains every run a few steps makes MLM++ MLM.)"""
    spec, runs = config["tables"][table], config["runs"]
    rows, problems = table_rows(config, table), []
    shown = {row["run"] for row in rows.values()}
    for run in spec["runs"]:
        if run not in shown and runs[run]["objective"] != "none":
            problems.append(f"tables.{table}.runs: {run} has no row in tables.{table}.rows")
    for name, row in rows.items():
        where = f"tables.{table}.rows.{name}"
        if row["run"] not in spec["runs"]:
            problems.append(f"{where}.run: {row['run']!r} is not one of tables.{table}.runs")
            continue
        if "of" not in row:
            continue
        base = rows.get(row["of"])
        if base is None or "of" in base:
            problems.append(f"{where}.of: {row['of']!r} is not a base row (a row without `of`); expected one of "
                            f"{sorted(r for r, v in rows.items() if 'of' not in v)}")
            continue
        differ = differences(config, row["run"], base["run"])
        if set(differ) - set(row["changes"]):
            problems.append(f"{where}: run {row['run']} differs from {base['run']} (row {row['of']}) in {differ}, "
                            f"but changes names {sorted(row['changes'])}; an ablation changes only what it names")
    return problems


def validate(raw: dict, schema: dict, path: Path | str = "params.yaml", every_profile: bool = True) -> dict:
    """Validate params as written and each profile merged over them (every profile, or only the
    active one); return the active profile's parameters, merged."""
    errors = _schema_errors(raw, schema, str(path))
    if errors:
        raise ParamsError("invalid parameters:\n  " + "\n  ".join(errors))
    profiles = raw.get("profiles", {})
    if raw["profile"] not in profiles:
        raise ParamsError(f"{path}: profile: {raw['profile']!r} is not defined; expected one of {sorted(profiles)}")
    resolved, found = {}, {}
    positions = schema["$defs"]["positions"]["enum"]
    for name in profiles if every_profile else [raw["profile"]]:
        merged = resolve_profile(raw, name)
        for problem in _schema_errors(merged, schema, "") or _reference_errors(merged, "", positions):
            found.setdefault(problem, []).append(name)
        resolved[name] = merged
    # a problem of the base parameters shows in every profile: said once, not once per profile
    for problem, names in found.items():
        everywhere = len(names) == len(resolved) > 1
        errors.append(f"{path}{problem}" if everywhere else f"{path} (profile {', '.join(names)}){problem}")
    if errors:
        raise ParamsError("invalid parameters:\n  " + "\n  ".join(errors))
    return add_pretraining_seeds(resolved[raw["profile"]])


def resolve_profile(raw: dict, profile: str) -> dict:
    """params.yaml as written with `profiles.<profile>` deep-merged over it."""
    merged = deep_merge({k: v for k, v in raw.items() if k != "profiles"}, raw["profiles"][profile])
    merged["profile"] = profile
    return merged


def read_params(path: Path | str = "params.yaml", every_profile: bool = False) -> tuple[dict, dict]:
    """params.yaml as written and the active profile's parameters, validated (the active
    profile only, unless `every_profile`); raises ParamsError naming every bad key."""
    path = Path(path)
    raw = read_yaml(path)
    return raw, validate(raw, read_yaml(schema_path()), path, every_profile)


def load_params(path: Path | str = "params.yaml") -> dict:
    """The active profile's parameters, validated: what every stage reads, once per process."""
    return read_params(path)[1]


def params_hash(config: dict) -> str:
    """A short, order-independent fingerprint of the resolved parameters for reports."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def corpus_datasets(config: dict, modality: str) -> list[str]:
    """The dataset(s) a modality pretrains on: `corpora.<modality>` is one name or a list."""
    names = config["corpora"][modality]
    return [names] if isinstance(names, str) else list(names)


def run_settings(config: dict, run: str) -> dict:
    """Pretraining settings for one run: shared defaults, then the run's overrides, with the
    run's own pretraining `seed` in place of the list of `seeds` (`pretraining_runs`)."""
    settings = {**config["pretrain"], **config["runs"][run].get("overrides", {})}
    del settings["seeds"]
    return {**settings, "seed": config["runs"][run].get("pretraining_seed", 0)}


# Seed s > 0 of run R is the run R-pseed<s>; seed 0 keeps R's name, so one-seed results keep
# their paths and adding seeds re-trains nothing.
SEED_MARK = "-pseed"


def seed_run(run: str, seed: int) -> str:
    """The name of pretraining seed `seed` of the declared run `run`."""
    return run if seed == 0 else f"{run}{SEED_MARK}{seed}"


def pretraining_runs(config: dict, run: str) -> list[str]:
    """The pretrained instances of a declared run, one per seed of its `seeds` (pretrain.seeds,
    or the run's overrides), in that order: what its table row reads."""
    return [seed_run(run, seed) for seed in pretraining_seeds(config, run)]


def pretraining_seeds(config: dict, run: str) -> list[int]:
    """A declared run's pretraining seeds: its overrides' `seeds`, else pretrain.seeds."""
    return {**config["pretrain"], **config["runs"][run].get("overrides", {})}["seeds"]


def declared_run(config: dict, run: str) -> str:
    """The run of params.yaml that a pretrained instance (`mlm-pseed1`) is a seed of."""
    return config["runs"][run].get("seed_of", run)


def declared_runs(config: dict) -> list[str]:
    """The runs params.yaml declares (not their seed instances), sorted."""
    return sorted(run for run, spec in config["runs"].items() if "seed_of" not in spec)


def add_pretraining_seeds(config: dict) -> dict:
    """`config` with every declared run's seed instances under `runs` (`mlm-pseed1`: `mlm`'s
    entry, marked `seed_of` and `pretraining_seed`), so every stage reads an instance's spec,
    settings and paths as a run's. Tables keep listing declared runs."""
    instances = {}
    for run, spec in config["runs"].items():
        for seed, name in zip(pretraining_seeds(config, run), pretraining_runs(config, run)):
            if seed:
                instances[name] = {**copy.deepcopy(spec), "seed_of": run, "pretraining_seed": seed}
    return {**config, "runs": {**config["runs"], **instances}}


def instance_cells(config: dict, cells: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (pretrained instance, task) pairs behind table cells of declared runs."""
    return [(instance, task) for run, task in cells for instance in pretraining_runs(config, run)]


def computes_in_bf16(precision: str, cuda: bool) -> bool:
    """The precision policy (maskbench.device), without torch: a model's forward passes run
    under bfloat16 autocast where `precision` is bf16, or auto on a CUDA device."""
    return precision == "bf16" or (precision == "auto" and cuda)


def launch_settings(config: dict, run: str) -> dict:
    """How many processes train `run`: `gpus` per node on `nodes` machines (params.yaml
    `launch`, then `launch.runs.<run>`). Scheduling only: it never changes what a run computes."""
    launch = config["launch"]
    return {"gpus": launch["gpus"], "nodes": launch["nodes"], **launch.get("runs", {}).get(declared_run(config, run), {})}


def accumulation(settings: dict, processes: int) -> int:
    """Micro-batches each of `processes` runs per optimizer step so that together they make
    the global batch: batch_size / (micro_batch_size x processes); ValueError where that is
    not a whole number, naming the micro-batch sizes that would divide it."""
    batch, micro = settings["batch_size"], settings["micro_batch_size"]
    if batch % (micro * processes):
        fits = [m for m in range(1, batch // processes + 1) if batch % (m * processes) == 0] if batch % processes == 0 else []
        expected = (f"expected micro_batch_size one of {fits[-6:]}" if fits
                    else f"no micro-batch divides it: choose a number of processes that divides {batch}")
        raise ValueError(f"batch_size {batch} is not micro_batch_size {micro} x {processes} process(es) x a whole "
                         f"number of accumulation steps; {expected}")
    return batch // (micro * processes)


def position_scheme(config: dict, run: str) -> str:
    """The `EncoderConfig.position_scheme` a run's encoder gets (the report prints it per row).

    Every run gets the pretraining setting `positions` (`pretrain.positions`, unless the run's
    `overrides` change it), so the arms of a table differ in their objective, not in how the
    encoder knows where a token is; the papers' own, unequal, schemes are runs of their own
    (`mlm_paper`, `mae_lm_paper`). `scheme_for` says what an objective adds to the setting.
    """
    return scheme_for(config["runs"][run], run_settings(config, run)["positions"])


def scheme_for(run: dict, positions: str) -> str:
    """The position scheme of a `runs.<name>` entry pretrained under the setting `positions`:
    the setting itself, except that ExLM's 2-D RoPE (knob `rope2d`, default true; ExLM §4.2) is
    the setting's RoPE plus the clone index, so `rope` becomes `rope2d` (`rope2d: false`, 1-D
    RoPE, is ExLM Tab. 2 "w/o 2D RoPE"). 2-D RoPE under a setting without RoPE is a ValueError,
    which validation reports naming the run (`_reference_errors`)."""
    if run["objective"] != "exlm" or not run.get("knobs", {}).get("rope2d", True):
        return positions
    parts = positions.split("+")
    if "rope" not in parts:
        raise ValueError(f"knobs.rope2d: true (ExLM's 2-D RoPE) needs rope in positions, not {positions!r}")
    return "+".join("rope2d" if part == "rope" else part for part in parts)


def task_grid(config: dict, task: str) -> dict[str, list]:
    """The fine-tuning grid of a task: its own `grid`, else `finetune.grid` ({} = one point)."""
    return config["tasks"][task].get("grid", config["finetune"].get("grid", {}))


def grid_size(config: dict, task: str) -> int:
    return math.prod(len(values) for values in task_grid(config, task).values())


# Where a task's fine-tuning settings come from, in the order they apply (later wins).
FINETUNE_SETTINGS_SOURCES = ("finetune.settings", "tasks.{task}.overrides", "finetune.settings_over_tasks")


def finetune_settings(config: dict, task: str) -> dict:
    """Fine-tuning settings for one task: shared defaults, then the task's overrides, then
    `finetune.settings_over_tasks`, so that a profile can bound every task (smoke: one short
    epoch) without restating each task's overrides."""
    return {**config["finetune"]["settings"], **config["tasks"][task].get("overrides", {}),
            **config["finetune"].get("settings_over_tasks", {})}


def table_cells(config: dict, table: str) -> list[tuple[str, str]]:
    """(run, task) pairs a table shows: every run on every task of its modality."""
    spec, runs, tasks = config["tables"][table], config["runs"], config["tasks"]
    return [(run, task) for run in spec["runs"] for task in spec["tasks"]
            if runs[run]["modality"] == tasks[task]["modality"]]


def has_key(tree: dict, key: str) -> bool:
    """Whether the dotted `key` is set in `tree` (params as resolved, as written, or a profile)."""
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def lookup(config: dict, key: str):
    """The value at a dotted params.yaml key (`tasks.mnli`)."""
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def _dotted(values: dict, prefix: str = "") -> dict:
    """`{"a": {"b": 1}}` as `{"a.b": 1}`."""
    flat = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        flat |= _dotted(value, f"{name}.") if isinstance(value, dict) and value else {name: value}
    return flat


def _where(raw: dict, key: str, given) -> str:
    """Where in params.yaml `key` is set for the active profile, or which keys there are instead."""
    profile = raw.get("profile")
    for place in (f"profiles.{profile}.{key}", key):  # the active profile's value wins over the base one
        try:
            now = repr(lookup(raw, place))
        except (KeyError, TypeError):
            continue
        now = now if len(now) <= 60 else now[:57] + "..."
        return f"set `{place}` in params.yaml (now {now}), or for one experiment `dvc exp run -S {place}={given}`"
    node, known = raw, []
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            break
        node, known = node[part], [*known, part]
    at = ".".join(known) or "the top level"
    keys = ", ".join(map(str, node)) if isinstance(node, dict) else "none: it is a value"
    return f"params.yaml has no key `{key}`; keys at {at}: {keys}"


def snakemake_config_error(given: dict, raw: dict) -> str:
    """The error for values given to `snakemake --config` or `--configfile`: every stage is a
    `maskbench` command that reads params.yaml itself (and DVC hashes params.yaml), so a value
    given to Snakemake alone would reach no job. Names each key given and where it is set."""
    lines = [f"{key}={value}: {_where(raw, key, value)}" for key, value in _dotted(given).items()]
    return ("snakemake --config/--configfile values are not read: the maskbench stages read params.yaml "
            "(and so does DVC), so edit it there:\n  " + "\n  ".join(lines))


def task_seeds(config: dict, task: str) -> list[int]:
    """Fine-tuning seeds of a task: its own `seeds`, else `finetune.seeds` (the papers use five
    for GLUE and SQuAD, three for MoleculeNet)."""
    return config["tasks"][task].get("seeds", config["finetune"]["seeds"])
