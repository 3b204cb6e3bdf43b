"""`maskbench validate` on randomly broken parameters: seeded mutations of keys, types, names and
paths either are refused with one line per problem naming its key, or are accepted; never an
uncaught exception, never a file written outside a scratch workspace. An accepted config is not
built: every file the workflow would write for it (each job's outputs, each file a dataset's
source names) is resolved and checked to lie inside the workspace.

The mutations start from params.yaml's smoke profile cut to what its tables use (a sixth of the
datasets, runs and tasks, every kind of table) with two of params.yaml's profiles, so that each
validation takes milliseconds and the 500 of the fast suite a few seconds."""

from __future__ import annotations

import copy
import datetime
import random
import re
from pathlib import Path

import pytest

from maskbench.cli import check_params
from maskbench.config import ParamsError, read_yaml, resolve_profile, schema_path
from maskbench.config.settings import corpus_datasets
from maskbench.data.sources import named_targets
from maskbench.io import inside
from maskbench.stages import all_jobs
from tests.helpers import RAW_PARAMS

SCHEMA = read_yaml(schema_path())
MUTATIONS = 500  # the fast suite's; seeded, so a failure is the same failure on every machine


def fuzz_base(raw: dict) -> dict:
    """params.yaml's smoke profile as the base, cut to the runs, tasks and datasets its tables
    use and a dataset of each other source kind (the `hf` one given local split names), with
    profiles `smoke` (nothing changed) and `tiny-3seeds` (three pretraining seeds)."""
    base = resolve_profile(raw, "smoke")
    tables = base["tables"].values()
    runs = {run for table in tables for run in table["runs"]}
    runs |= {row["run"] for table in tables for row in (table.get("rows") or {}).values() if row}
    tasks = {task for table in tables for task in table["tasks"]} | set(base["analysis"]["finetune_task"].values())
    base["runs"] = {k: v for k, v in base["runs"].items() if k in runs}
    base["tasks"] = {k: v for k, v in base["tasks"].items() if k in tasks}
    used = {d for modality in base["corpora"] for d in corpus_datasets(base, modality)}
    used |= {task["dataset"] for task in base["tasks"].values()}
    for kind in ("hf", "url", "local"):  # a task dataset where there is one
        names = [name for name, spec in base["datasets"].items() if spec["source"]["kind"] == kind]
        chosen = min(names, key=lambda name: base["datasets"][name]["role"] != "task")
        used.add(chosen)
        if kind == "hf":
            base["datasets"][chosen]["source"]["splits"] = {"train": "train", "dev": "validation"}
    base["datasets"] = {k: v for k, v in base["datasets"].items() if k in used}
    for section in ("tokens", "rows"):
        base["resources"][section] = {k: v for k, v in base["resources"][section].items() if k in used}
    base["launch"]["runs"] = {k: v for k, v in base["launch"].get("runs", {}).items() if k in runs}
    base["profiles"] = {"smoke": {}, "tiny-3seeds": copy.deepcopy(raw["profiles"]["tiny-3seeds"])}
    return base


BASE = fuzz_base(RAW_PARAMS)

# What a YAML file can hold where a value goes (`.nan`, `.inf`, dates and bytes included)
VALUES = [None, True, False, 0, 1, -1, 7, 10**12, 0.5, -2.5, 1e300, float("inf"), float("nan"), "", "x", "mlm",
          "smoke", "table1", "../../../escape", "/tmp/escape", "a/b", "..", "[MASK]", "ü" * 3, [], [0], ["x"],
          [None], {}, {"x": 1}, {"k": [1]}, datetime.date(2026, 12, 1), b"\x00"]
# ... and where a key goes (YAML keys may be numbers, booleans, null)
KEYS = ["bogus", "../../../escape", "/tmp/escape", "a.b", "a/b", "", "..", ".hidden", 1, 0, None, True, 1.5,
        "mlm", "table9", "smoke", "text", "seed0-pseed1"]
# where params.yaml gives a name that becomes a file or folder name (or a dotted key: profiles):
# the keys of these mappings, and these values
NAMED_FILES = ["datasets", "runs", "tasks", "tables", "profiles", "datasets.*.source.members",
               "datasets.*.source.files", "datasets.*.source.splits"]
NAMED_VALUES = ["tracking.experiment", "datasets.*.source.package"]  # (a local source's path is read, not written)
ESCAPES = ["../../../escape", "../escape.csv", "/tmp/escape.csv", "a/../../escape", "..", ".", "sub/x.csv",
           "~/escape.csv", "x\\..\\..\\escape"]


def nodes(tree, prefix=()) -> list[tuple]:
    """The path (keys and list indices) of every node below `tree`."""
    children = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    found = []
    for key, value in children:
        found += [(*prefix, key), *nodes(value, (*prefix, key))]
    return found


def at(tree, path):
    for part in path:
        tree = tree[part]
    return tree


def edited(tree, path: tuple, edit):
    """A copy of `tree` whose containers along `path` are copied and `edit` applied to the last
    (the rest shared with `tree`, which stays as it was)."""
    copied = tree.copy()
    if not path:
        edit(copied)
        return copied
    copied[path[0]] = edited(tree[path[0]], path[1:], edit)
    return copied


def dotted(path) -> str:
    return ".".join(map(str, path))


def matching(tree, pattern: str) -> list[tuple]:
    """The paths of `tree` that `pattern` (dotted, `*` for any key) names."""
    found = [()]
    for part in pattern.split("."):
        found = [(*p, key) for p in found if isinstance(node := at(tree, p), dict)
                 for key in (node if part == "*" else [part] if part in node else [])]
    return found


def set_at(tree, path: tuple, value):
    return edited(tree, path[:-1], lambda node: node.__setitem__(path[-1], value))


def renamed(tree, path: tuple, old, new):
    return edited(tree, path, lambda node: node.__setitem__(new, node.pop(old)))


def mutate(tree, rng: random.Random) -> tuple[dict, str, str | None]:
    """One random change: (the changed tree, what changed, the key a refusal must name, if one
    must be named: the places where params.yaml names a file, given a name that leaves its folder)."""
    everything = nodes(tree)
    path = rng.choice(everything)
    kind = rng.choice(["value", "value", "delete", "add", "rename", "number", "list", "escape"])
    if kind == "value":
        value = copy.deepcopy(rng.choice(VALUES))
        return set_at(tree, path, value), f"{dotted(path)} = {value!r}", None
    if kind == "delete":
        return edited(tree, path[:-1], lambda node: node.pop(path[-1])), f"del {dotted(path)}", None
    if kind == "number":
        path = rng.choice([p for p in everything if type(at(tree, p)) in (int, float)])
        old = at(tree, path)
        value = rng.choice([0, -1, -old, old * 1000, old / 1000, old + 1, float("nan"), float("inf")])
        return set_at(tree, path, value), f"{dotted(path)} = {value!r}", None
    if kind == "list":
        path = rng.choice([p for p in everything if isinstance(at(tree, p), list)])
        how = rng.choice(["empty", "twice", "append"])
        change = {"empty": lambda items: items.clear(), "twice": lambda items: items.extend(items),
                  "append": lambda items: items.append(copy.deepcopy(rng.choice(VALUES)))}[how]
        return edited(tree, path, change), f"{dotted(path)}: {how}", None
    if kind == "escape":
        escape = rng.choice(ESCAPES)
        if rng.random() < 0.5:
            path = rng.choice([p for pattern in NAMED_VALUES for p in matching(tree, pattern)])
            return set_at(tree, path, escape), f"{dotted(path)} = {escape!r}", dotted(path)
        mapping = rng.choice([p for pattern in NAMED_FILES for p in matching(tree, pattern) if at(tree, p)])
        old = rng.choice(list(at(tree, mapping)))
        return renamed(tree, mapping, old, escape), f"{dotted(mapping)}: {old!r} -> {escape!r}", dotted(mapping)
    path = rng.choice([p for p in [(), *everything] if isinstance(at(tree, p), dict)])
    new = copy.deepcopy(rng.choice(KEYS))
    if kind == "add" or not at(tree, path):
        value = copy.deepcopy(rng.choice([*VALUES, *at(tree, path).values()]))
        return set_at(tree, (*path, new), value), f"{dotted(path)}.{new!r} = {value!r}", None
    old = rng.choice(list(at(tree, path)))
    return renamed(tree, path, old, new), f"{dotted(path)}: {old!r} -> {new!r}", None


# a problem line: the file, perhaps the profiles it is found in, then the key (dotted, with list
# indices) and what is wrong; or, for a job estimated beyond the cluster's limits, the job's
# command and what is wrong, naming the keys that set it
PROBLEM = re.compile(r"^params\.yaml( \(profile [^)]+\))?: (?P<key>\(top level\)|maskbench [^:]+|[^\s:]+): \S")


def names_a_key(line: str) -> bool:
    match = PROBLEM.match(line)
    return bool(match) and (not match["key"].startswith("maskbench ") or
                            any(re.search(rf"\b{section}\.\w", line) for section in BASE))


def refusal_problems(message: str) -> list[str]:
    """The problem lines of a ParamsError: after a heading line, one per problem."""
    lines = message.splitlines()
    if len(lines) == 1:
        return lines
    assert lines[0] in ("invalid parameters:", "params.yaml asks more than the cluster gives:"), message
    return [line.removeprefix("  ") for line in lines[1:]]


def written_paths(config: dict, workspace: Path) -> list[Path]:
    """Every file the workflow would write for `config`, resolved under `workspace` (what Snakemake
    and DVC derive: each job's outputs; what a download writes: each file its source names)."""
    jobs = all_jobs(config)
    written = [inside(workspace, output, f"{job.stage.name} {job.wildcards}") for job in jobs
               for output in job.output.values()]
    for job in jobs:
        if job.stage.name == "download":
            dataset = job.wildcards["dataset"]
            raw_dir = inside(workspace, job.output["raw"], f"datasets.{dataset}")
            source = config["datasets"][dataset]["source"]
            written += named_targets(source, raw_dir, f"datasets.{dataset}.source").values()
    return written


def listing(folder: Path, depth: int = 3) -> list[str]:
    """Every path `depth` levels below `folder`, and the places the escaping names point at."""
    found = [p for level in range(1, depth + 1) for p in folder.glob("/".join(["*"] * level))]
    return sorted(map(str, [*found, *Path("/tmp").glob("escape*"), *Path.home().glob("escape*")]))


def test_the_base_is_valid_and_cuts_nothing_a_table_needs(tmp_path, monkeypatch):
    """The fuzz starts from valid parameters with every kind of table, source and profile path."""
    monkeypatch.chdir(tmp_path)
    config, _ = check_params(copy.deepcopy(BASE), SCHEMA, "params.yaml")
    kinds = {table.get("kind", "objectives") for table in config["tables"].values()}
    assert kinds == {"objectives", "repeated_mlm_grid", "exlm_grid", "ablations", "effective_rank", "look_around"}
    assert {d["source"]["kind"] for d in config["datasets"].values()} == {"pypi", "hf", "url", "local"}
    assert len(written_paths(config, tmp_path)) > 100


def test_mutated_params_are_refused_by_key_or_accepted_and_write_nothing_outside(tmp_path, monkeypatch):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    monkeypatch.chdir(workspace)
    around = listing(tmp_path.parent)
    rng = random.Random(67)
    accepted, refused = [], []
    for trial in range(MUTATIONS):
        params, changes, named = BASE, [], None
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            params, change, named = mutate(params, rng)
            changes.append(change)
        what = f"mutation {trial} ({'; '.join(changes)})"
        try:
            config, _ = check_params(params, SCHEMA, "params.yaml")
        except ParamsError as exc:
            problems = refusal_problems(str(exc))
            assert problems and all(map(names_a_key, problems)), f"{what}: {exc}"
            keys = [PROBLEM.match(line)["key"] for line in problems]
            assert named is None or len(changes) > 1 or named in keys, f"{what}: {exc}"
            refused.append(what)
            continue
        except Exception as exc:  # noqa: BLE001 - any other exception is the bug this test looks for
            pytest.fail(f"{what}: uncaught {type(exc).__name__}: {exc}")
        assert named is None or len(changes) > 1, f"{what}: accepted"
        for path in written_paths(config, workspace):
            assert path.resolve().is_relative_to(workspace.resolve()), f"{what}: writes {path}"
        accepted.append(what)
    assert listing(tmp_path.parent) == around
    assert list(workspace.iterdir()) == []
    # both outcomes are exercised, not only refusals of broken YAML structure
    assert len(accepted) > MUTATIONS // 20 and len(refused) > MUTATIONS // 2, (len(accepted), len(refused))


@pytest.mark.parametrize("change, problem", [
    # each an uncaught exception the fuzz found (NaN: ValueError converting it to an integer row
    # count; 1e300 as seq_len: OverflowError; a null table name: TypeError sorting the tables;
    # a model size without n_inner: KeyError in the estimates), now a line naming the key
    (lambda p: p["tasks"]["bbbp"]["split"].update(test=float("nan")), "params.yaml: tasks.bbbp.split.test: nan is not"),
    (lambda p: p["pretrain"].update(lr=float("inf")), "params.yaml: pretrain.lr: inf is not a finite number"),
    (lambda p: p["pretrain"].update(seq_len=1e300), "params.yaml: pretrain.seq_len: 1e+300 is not of type 'integer'"),
    (lambda p: p["pretrain"].update(steps=30.0), "params.yaml: pretrain.steps: 30.0 is not of type 'integer'"),
    (lambda p: p["tables"].update({None: p["tables"].pop("table6")}), "params.yaml: tables.None: the key None is a"),
    (lambda p: p["model_sizes"]["smoke"].pop("n_inner"), "params.yaml: model_sizes.smoke: 'n_inner' is a required"),
])
def test_what_the_fuzz_found_is_refused_naming_the_key(change, problem):
    params = copy.deepcopy(BASE)
    change(params)
    with pytest.raises(ParamsError, match=re.escape(problem)):
        check_params(params, SCHEMA, "params.yaml")
