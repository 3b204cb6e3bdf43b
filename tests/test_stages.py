"""The stage table (maskbench.stages) is the one declaration of the stage graph: Snakemake's DAG
and dvc.yaml, both rendered from it, describe the same jobs with the same commands and files;
the CLI takes its options from it; no path pattern is spelled outside maskbench.paths."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest
import yaml

from maskbench import dvc_yaml, paths
from maskbench.cli import build_parser
from maskbench.config import grid_size, load_params, read_yaml, schema_path, validate
from maskbench.stages import STAGES, all_jobs
from tests.helpers import REPO, snakemake_jobs, use_profile


def dvc_stages(text: str) -> dict[str, dict]:
    """Command -> {deps, outputs} of every dvc.yaml stage but DVC's own validate stage (Snakemake
    validates params.yaml when it reads the Snakefile)."""
    stages = {}
    for name, stage in yaml.safe_load(text)["stages"].items():
        if name == "validate":
            continue
        outs = set()
        for key in ("outs", "metrics", "plots"):
            outs |= {next(iter(o)) if isinstance(o, dict) else o for o in stage.get(key, [])}
        stages[stage["cmd"]] = {"outputs": outs, "deps": set(stage["deps"])}
    return stages


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["smoke", "tiny"])
def test_snakemake_dag_and_dvc_yaml_have_the_same_jobs_and_files(workdir, profile):
    """dvc.yaml holds the jobs of Snakemake's `reports` (what the profile reports), each with
    the same files and its parameters' record as an input of both; `all` is every job of the table."""
    config = use_profile(workdir, profile)
    snake = snakemake_jobs(workdir, "reports")
    dvc = dvc_stages((workdir / "dvc.yaml").read_text())
    assert snake.keys() == dvc.keys()
    for command in snake:
        # and DVC's outputs hold the job's build stamp, which its restores bring back (maskbench.built)
        stamp = {p for p in dvc[command]["outputs"] if p.startswith("logs/built/")}
        assert snake[command]["outputs"] == dvc[command]["outputs"] - stamp and len(stamp) == 1, command
        # DVC's deps are Snakemake's inputs, the validation stamp and the code the stage hashes
        beside = {paths.PARAMS_STAMP, *dvc_yaml.stage_code(command.split()[1])}
        # Snakemake's record of the stage's code stands for the code files DVC hashes itself
        code_record = paths.CODE_RECORD.format(stage=command.split()[1])
        assert code_record in snake[command]["inputs"], command
        # and its stale mark for what DVC compares in dvc.lock (maskbench.built)
        stale_mark = next(p for p in snake[command]["inputs"] if p.startswith("logs/stale/"))
        assert snake[command]["inputs"] - {code_record, stale_mark} <= dvc[command]["deps"], command
        assert dvc[command]["deps"] - snake[command]["inputs"] <= beside, command
        assert any(p.startswith("logs/params/") for p in snake[command]["inputs"]), command
    # and `all` is the table's jobs: one per (stage, wildcards), each logging where the table says
    everything = snakemake_jobs(workdir)
    table = {job.stage.command(job.wildcards): job for job in all_jobs(config)}
    assert table.keys() == everything.keys() and snake.keys() <= table.keys()
    for command, job in table.items():
        assert everything[command]["log"] == job.stage.log.format(**job.wildcards)


@pytest.mark.slow
def test_a_table_target_needs_only_its_own_jobs(workdir):
    use_profile(workdir, "smoke")
    jobs = snakemake_jobs(workdir, "reports/table1.md")
    assert {c.split()[1] for c in jobs} == set(STAGES) - {"analyse", "perplexity", "index"}  # table1 reads neither
    assert not [c for c in jobs if c.startswith("maskbench download --dataset wikipedia")]


def test_dvc_yaml_and_the_chosen_profile_are_not_in_git():
    """Both are generated on the checkout (`maskbench profile NAME`), so switching profile
    leaves the tracked files as they were (test_quick_start_leaves_the_tree_clean). Untracked,
    not ignored: DVC refuses a git-ignored dvc.yaml, and a commit of an experiment (`git add -A`,
    `dvc exp run`) carries both, so `dvc exp show` has each commit's profile."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files", "dvc.yaml", "profile.yaml"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout
    assert tracked == ""
    for name in ("dvc.yaml", "profile.yaml"):
        assert subprocess.run(["git", "check-ignore", "-q", "--no-index", name], cwd=REPO).returncode == 1, name


@pytest.mark.slow
def test_dvc_metrics_are_the_scorecard_and_scores_show_in_120_columns(workdir, tmp_path):
    """DVC's one metrics file is the scorecard's counts, so `dvc metrics show` and `dvc exp show`
    stay a few columns wide (one column per score file made `dvc exp show` unreadable); the
    scores files, uncached, still show as one narrow table when named."""
    from maskbench.cli import write_scores

    use_profile(workdir, "smoke")
    stages = yaml.safe_load((workdir / "dvc.yaml").read_text())["stages"]
    declared = [next(iter(m)) for stage in stages.values() for m in stage.get("metrics", [])]
    assert declared == [paths.SCORECARD]
    outs = {next(iter(o)): o for stage in stages.values() for o in stage.get("outs", []) if isinstance(o, dict)}
    cards = [p for p in outs if p.startswith("data/cards/")]
    assert cards and all(outs[p][p] == {"cache": False} for p in cards)  # still in git, not in DVC's cache
    score_files = [p for p in outs if p.endswith("/scores.json")]
    assert score_files and all(outs[p][p] == {"cache": False} for p in score_files)

    scores = {"pretrain": {"train_loss": 6.283185307, "valid_loss": None},  # valid_loss: not measured
              "finetune": {"dev": 0.718281828, "test": -12.345678901}, "aggregate": {"test": 0.577215664}}
    for path in score_files:
        (workdir / path).parent.mkdir(parents=True, exist_ok=True)
        write_scores(str(workdir / path), scores[next(n for n, s in stages.items()
                                                     if {path: {"cache": False}} in s.get("outs", [])).split("-")[0]])
    assert yaml.safe_load((workdir / "runs/pretrain/mlm/scores.json").read_text()) == {"train_loss": 6.283185307}
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=workdir, check=True)
    shown = subprocess.run(["dvc", "metrics", "show", *score_files], cwd=workdir, capture_output=True, text=True,
                           check=True).stdout
    lines = shown.splitlines()
    assert lines[0].split() == ["Path", "dev", "test", "train_loss"] and len(lines) == len(score_files) + 1
    assert max(map(len, lines)) <= 120


@pytest.mark.slow
def test_validate_says_when_dvc_yaml_is_stale_and_dvc_stops(workdir):
    use_profile(workdir, "tiny")
    (workdir / "profile.yaml").write_text("profile: smoke\n")  # a different stage graph; dvc.yaml still the tiny one
    run = lambda *args: subprocess.run([sys.executable, "-m", "maskbench.cli", "validate", *args], cwd=workdir,
                                       capture_output=True, text=True)
    checked = run()
    assert checked.returncode == 0 and "dvc.yaml does not match" in checked.stderr
    stamped = run("--stamp", paths.PARAMS_STAMP)
    assert stamped.returncode != 0 and "maskbench dvc-yaml" in stamped.stderr
    assert not (workdir / paths.PARAMS_STAMP).exists()


def test_cli_options_are_the_stage_wildcards():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "stage").choices
    for name, stage in STAGES.items():
        options = {a.dest for a in subcommands[name]._actions if a.required}
        assert options == set(stage.wildcards), name


@pytest.mark.slow
def test_a_stage_job_logs_to_its_log_file(workdir):
    """The CLI logs to the stage's log path by default and to `--log` when given, failures included."""
    result = subprocess.run([sys.executable, "-m", "maskbench.cli", "report", "--table", "nope"], cwd=workdir,
                            capture_output=True, text=True)
    assert result.returncode != 0 and "tables.nope is not defined" in result.stderr
    result = subprocess.run([sys.executable, "-m", "maskbench.cli", "report", "--table", "table1", "--log",
                             "elsewhere.log"], cwd=workdir, capture_output=True, text=True)
    assert "wrote reports/table1.md" in (workdir / "elsewhere.log").read_text()
    assert not (workdir / paths.LOGS["report"].format(table="table1")).exists()


# Literal prefixes of every path pattern: spelled in maskbench/paths.py and nowhere else in code.
PATH_PREFIXES = sorted({re.split(r"\{", p)[0] for p in (*vars(paths).values(), *paths.LOGS.values())
                        if isinstance(p, str) and "/" in p})


def _code_strings(path) -> list[str]:
    """The string constants of a Python file, docstrings left out (docs may name paths)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def test_path_patterns_are_spelled_only_in_paths_py():
    assert "runs/finetune/" in PATH_PREFIXES and "data/tokens/" in PATH_PREFIXES
    sources = [p for p in (REPO / "src/maskbench").rglob("*.py") if p.name != "paths.py"]
    found = {(str(p.relative_to(REPO)), prefix) for p in sources for s in _code_strings(p)
             for prefix in PATH_PREFIXES if prefix in s}
    rules = [REPO / "Snakefile", *(REPO / "workflow/rules").glob("*.smk")]
    code_lines = lambda p: [line for line in p.read_text().splitlines() if not line.lstrip().startswith("#")]
    found |= {(str(p.relative_to(REPO)), prefix) for p in rules for line in code_lines(p)
              for prefix in PATH_PREFIXES if prefix in line}
    assert not found


def test_no_generated_output_is_committed():
    """A tracked target would look already built to Snakemake on a fresh clone, so it would never run."""
    tracked = subprocess.run(["git", "ls-files", "reports", "runs", "data"], cwd=REPO, capture_output=True,
                             text=True).stdout.split()
    assert not [p for p in tracked if re.fullmatch(r"reports/table\d+\.md|runs/.*|data/(?!cards/).*", p)]


def test_one_pretraining_seeds_analysis_is_a_target_snakemake_plans(workdir):
    """`snakemake runs/analysis/mlm-pseed1/...` under tiny-3seeds plans that seed's pretraining
    and its analysis (its records and stale mark are written for it), not a missing input."""
    use_profile(workdir, "tiny-3seeds")
    target = paths.ANALYSIS_ENTROPY.format(run="mlm-pseed1")
    jobs = snakemake_jobs(workdir, target)
    assert any(c.startswith("maskbench analyse") and "mlm-pseed1" in c for c in jobs)
    assert any(c.startswith("maskbench pretrain") and "mlm-pseed1" in c for c in jobs)
    assert not any(c.startswith("maskbench finetune") for c in jobs)  # a seed instance keeps no encoder


@pytest.mark.slow
def test_paper_profile_dry_runs_the_papers_full_grid(workdir):
    """table1: 3 text runs and the `none` control x (8 GLUE tasks + SQuAD 2.0) x 5 seeds and 2 SMILES
    runs and `smiles_none` x 7 MoleculeNet sets x 3 seeds, and table4 adds HIV; tables 2 and 3: the 14 Repeated-MLM
    cells, the 6
    ExLM k x p runs and `none` x 4 GLUE tasks x 3 seeds (ExLM Fig. 3, 8, Tab. 4, 6); table5: MAE-LM Tab. 2's 16
    rows x 8 GLUE tasks x 5 seeds (its Fig. 4's 5 δ rows SQuAD 2.0 too), ExLM Tab. 2's 8 rows by Tab. 6 as
    table3 (its 6 runs not in tables 2, 3 x 4 tasks x 3 seeds); table7: AR, DAR, MLM at 0.3 and variable-length
    MLM x 8 GLUE tasks x 5 seeds (`none` and `mlm` are table1's, and score Look Around's F1 / Pearson QQP, MRPC,
    STS-B too), and the generation perplexity of its 5 pretrained runs. Each text
    job searches its task's grid (ExLM Tab. 11, MAE-LM Tab. 4-5). Its data: Wikipedia + BookCorpus,
    Uni-Mol's SMILES, all of GLUE, SQuAD 2.0 and MoleculeNet."""
    config = use_profile(workdir, "paper")
    jobs = snakemake_jobs(workdir, "reports")  # what the profile reports: dvc.yaml's jobs
    assert jobs.keys() == dvc_stages((workdir / "dvc.yaml").read_text()).keys()
    records = {paths.CODE_RECORD.format(stage="tokenizer")}
    assert jobs["maskbench tokenizer --modality text"]["inputs"] == {
        "data/raw/wikipedia", "data/raw/bookcorpus", paths.PARAMS_RECORD.format(job="tokenizer-text"),
        paths.STALE_MARK.format(job="tokenizer-text"), *records}
    assert jobs["maskbench tokenizer --modality smiles"]["inputs"] == {
        "data/raw/unimol_smiles", paths.PARAMS_RECORD.format(job="tokenizer-smiles"),
        paths.STALE_MARK.format(job="tokenizer-smiles"), *records}
    tasks = {command.split()[-1] for command in jobs if command.startswith("maskbench task ")}
    assert {"mnli", "qqp", "qnli", "sst2", "cola", "rte", "mrpc", "stsb", "squad_v2",
            "bace", "bbbp", "clintox", "hiv", "tox21", "sider", "muv", "toxcast"} <= tasks
    finetunes = [c for c in jobs if c.startswith("maskbench finetune ")]
    # table7 also scores `none` and `mlm` on the three tasks Look Around reads by F1 / Pearson
    # (la_qqp, la_mrpc, la_stsb), beside table1's accuracy / Spearman ones
    # table5: 17 text runs (MAE-LM's own-setting MLM, `mlm_paper`, beside its Tab. 2 rows), the 5 of
    # MAE-LM Fig. 4's δ series on SQuAD 2.0 too, and 6 SMILES ones
    assert len(finetunes) == (4 * 9 * 5 + 3 * 8 * 3 + 21 * 4 * 3 + (17 * 8 * 5 + 5 * 5 + 6 * 4 * 3) + 4 * 8 * 5
                              + 2 * 3 * 5)
    assert sorted(c.split()[-1] for c in jobs
                  if c.startswith("maskbench perplexity ")) == ["ar", "dar", "mlm", "mlm_p30", "varlen_mlm"]
    # the controls: baselines of every task of a table, probes of every cell but SQuAD 2.0's
    assert len([c for c in jobs if c.startswith("maskbench baseline ")]) == 17 + 4 + 3
    probes = [c for c in jobs if c.startswith("maskbench probe ")]
    assert len(probes) == 4 * 8 + 3 * 8 + 21 * 4 + (17 * 8 + 6 * 4) + 4 * 8 + 2 * 3
    grids = {t: grid_size(config, t) for t in config["tables"]["table1"]["tasks"] + config["tables"]["table2"]["tasks"]}
    assert {t: grids[t] for t in ("mnli", "qqp", "qnli", "sst2")} == dict.fromkeys(
        ("mnli", "qqp", "qnli", "sst2"), 4 * 3)
    assert {t: grids[t] for t in ("cola", "rte", "mrpc", "stsb")} == dict.fromkeys(
        ("cola", "rte", "mrpc", "stsb"), 4 * 2 * 4 * 2)
    assert grids["squad_v2"] == 4 * 2 * 2 * 2
    assert all(grids[t] == 1 for t in ("bace", "bbbp", "tox21", "sider", "muv", "clintox", "toxcast", "rmlm_rte"))


def test_every_dvc_stage_depends_on_validation_and_its_record_of_only_its_keys(workdir):
    """A job's parameters reach DVC as its record (maskbench.job_params), which the validate
    stage writes: DVC's own params are the profile alone (params.yaml's own on a clone where no
    profile was chosen; profile.yaml's once one was), one column of `dvc exp show`."""
    from maskbench.job_params import record_path, values

    stages = yaml.safe_load((workdir / "dvc.yaml").read_text())["stages"]
    assert stages["validate"]["params"] == [{"params.yaml": ["profile"]}]
    assert "params.yaml" in stages["validate"]["deps"]
    assert not [name for name, stage in stages.items() if name != "validate" and "params" in stage]
    w = {"run": "mlm", "task": "word_order", "seed": 1}
    assert paths.PARAMS_STAMP in stages["finetune-mlm-word_order-seed1"]["deps"]
    assert record_path("finetune", w) in stages["finetune-mlm-word_order-seed1"]["deps"]
    config = load_params(workdir / "params.yaml")
    finetune = values(config, "finetune", w)
    assert "finetune.settings" in finetune and "tasks.word_order.metric" in finetune
    assert not [key for key in finetune if key.endswith(".label")
                or key.startswith(("tables", "tracking", "finetune.seeds"))]


@pytest.mark.slow
def test_stage_params_follow_the_profile_and_skip_unset_keys(raw_params):
    raw_params["profile"] = "paper"
    config = validate(raw_params, read_yaml(schema_path()))
    finetune = lambda task: STAGES["finetune"].params(config, {"run": "mlm", "task": task, "seed": 1})
    assert "tasks.cola.grid" in finetune("cola")
    assert "tasks.rte.overrides" not in finetune("rte")
    assert "model_sizes.base-smiles" in STAGES["pretrain"].params(config, {"run": "smiles_mlm"})


def test_resources_follow_the_work(raw_params):
    """A job asks its estimate (maskbench.resources; tests/test_plan.py checks the estimates):
    minutes rounded up, a GPU where it runs on cuda with at least the CUDA host-memory floor;
    the whole grid of a task runs in one fine-tuning job and costs accordingly."""
    raw_params["profile"] = "paper"
    config = validate(raw_params, read_yaml(schema_path()))
    finetune = lambda task: {"run": "mlm", "task": task, "seed": 1}
    asked = STAGES["finetune"].resources(config, finetune("rte"))
    assert asked["runtime"] == -(-STAGES["finetune"].estimate(config, finetune("rte")).seconds // 60)
    assert asked["gpu"] == 1 and asked["mem_mb"] >= config["cluster"]["cuda_host_mem_mb"]
    # rmlm_rte: RTE's rows, one grid point of 3 epochs; rte: the 64-point grid, 2-10 epochs
    assert grid_size(config, "rte") == 64 and grid_size(config, "rmlm_rte") == 1
    startup = config["cluster"]["safety"] * config["throughput"][config["cluster"]["gpu"]]["startup_s"]
    work = {task: STAGES["finetune"].estimate(config, finetune(task)).seconds - startup for task in ("rte", "rmlm_rte")}
    assert work["rte"] > 5 * work["rmlm_rte"]
    declared = STAGES["download"].resources(config, {"dataset": "glue_rte"})
    download = config["resources"]["download"]
    assert declared == {"threads": 1, "mem_mb": download["mem_mb"], "gpu": 0,
                        "runtime": max(-(-download["runtime"] * config["cluster"]["safety"] // 1),
                                       config["cluster"]["min_runtime"])}


@pytest.mark.slow
def test_config_overrides_are_refused_naming_each_key_and_where_it_is_set(workdir):
    """`snakemake --config` or `--configfile` values would reach no stage (each reads
    params.yaml): Snakemake stops with the project's message, not a traceback. (A dotted key,
    `--config pretrain.lr=1`, Snakemake itself refuses before reading the Snakefile.)"""
    (workdir / "override.yaml").write_text("pretrain: {steps: 3}\n")
    result = subprocess.run(["snakemake", "-n", "--cores", "1", "--config", "profile=paper", 'pretrain={"lr": 0.1}',
                             "colour=red", "--configfile", "override.yaml"], cwd=workdir,
                             capture_output=True, text=True)
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in out
    assert "snakemake --config/--configfile values are not read: the maskbench stages read params.yaml" in out
    assert "profile=paper: set `profile` in params.yaml (now 'tiny'), or for one experiment " \
           "`dvc exp run -S profile=paper`" in out
    assert "pretrain.lr=0.1: set `pretrain.lr` in params.yaml (now 0.001)" in out
    assert "pretrain.steps=3: set `pretrain.steps` in params.yaml" in out
    assert "colour=red: params.yaml has no key `colour`; keys at the top level: profile, datasets," in out


@pytest.mark.slow
def test_a_one_letter_config_key_is_refused(workdir):
    """`--config x=1`: Snakemake (8.17 to 9.27.1 at least; snakemake/snakemake#3015) refuses a
    one-letter key itself, with a traceback, before it reads the Snakefile, where the project's
    message is given: docs/parameters.md says so. Once Snakemake passes the key on, the project's
    message names it (and this test asks for the docs to drop the caveat)."""
    result = subprocess.run(["snakemake", "-n", "--cores", "1", "--config", "x=1"], cwd=workdir, capture_output=True,
                            text=True)
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Config entry must start with a valid identifier" in out, \
        "Snakemake now reads one-letter --config keys: drop the caveat from docs/parameters.md and this test's check"
    assert "a single letter" in (REPO / "docs/parameters.md").read_text()


def test_a_stage_hashes_what_its_command_imports_transitively(tmp_path, monkeypatch):
    """DVC's code dependencies of a stage follow the imports of `maskbench <stage>` (the CLI's
    own and its `cmd_<stage>`'s), through packages' __init__, with the data files those modules
    name (not a data file no imported module names, nor one only a module outside the stage
    reads); not into the plumbing; a directory read whole is one entry."""
    sources = {
        "cli.py": "from maskbench import io\nfrom maskbench.config import x\n\n\ndef cmd_other():\n"
                  "    from maskbench import unused\n\n\ndef cmd_train():\n    from maskbench.train.loop import run\n",
        "io.py": "from maskbench import unused\n",  # plumbing: what it imports is not the stage's code
        "unused.py": "NOISE = 'noise.yaml'\n", "noise.yaml": "",
        "config/__init__.py": "x = 1\n",
        "train/__init__.py": "",
        "train/loop.py": "from maskbench.train import helpers\nfrom maskbench.kernel.build import compile\n",
        "train/helpers.py": "",
        "kernel/__init__.py": "", "kernel/build.py": "SOURCE = 'dag.cu'\n", "kernel/other.py": "",
        "kernel/dag.cu": "", "kernel/notes.yaml": "",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(dvc_yaml, "PACKAGE", tmp_path)
    assert dvc_yaml.stage_code.__wrapped__("train") == (
        "src/maskbench/config", "src/maskbench/kernel/__init__.py", "src/maskbench/kernel/build.py",
        "src/maskbench/kernel/dag.cu", "src/maskbench/train")


def test_each_stage_hashes_the_code_it_computes_with_and_no_more():
    """Pretraining hashes the encoder, objectives, CUDA kernel and loop; the stages that never
    run the encoder (data, aggregation, reports) do not, so changing it re-runs no data stage;
    no stage hashes the plumbing."""
    code = {name: set(dvc_yaml.stage_code(name)) for name in STAGES}

    def hashes(stage: str, path: str) -> bool:
        return any(path == entry or path.startswith(entry + "/") for entry in code[stage])

    for path in ("model/encoder.py", "objectives/exlm.py", "align/dag.cu", "train/pretrain.py", "config/load.py"):
        assert hashes("pretrain", f"src/maskbench/{path}"), path  # dag.cu: the kernel's source, read at run time
    assert hashes("report", "src/maskbench/report/published.yaml") and hashes("report", "src/maskbench/eval/verdict.py")
    # the declared noise is the verdicts': editing it re-renders tables, it re-trains nothing
    assert {name for name in STAGES if hashes(name, "src/maskbench/noise.yaml")} == {"report", "index"}
    for name in ("download", "tokenizer", "tokenize", "task", "aggregate", "report", "index"):
        for path in ("model/encoder.py", "model/positions.py", "objectives/mlm.py", "train/pretrain.py"):
            assert not hashes(name, f"src/maskbench/{path}"), (name, path)
        assert hashes(name, "src/maskbench/model/schemes.py")  # params validation's position-scheme rule
    plumbing = {f"src/maskbench/{name}.py" for name in dvc_yaml.PLUMBING}
    assert not plumbing & set().union(*code.values())


def test_no_lambda_is_copied_between_stages():
    """What several stages share (the threads of a run's jobs, say) is one named function of
    the table, so changing it changes every stage that uses it."""
    source = (REPO / "src/maskbench/stages.py").read_text()
    [table] = [node for node in ast.parse(source).body
               if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "STAGES"]
    lambdas = [ast.get_source_segment(source, node) for node in ast.walk(table) if isinstance(node, ast.Lambda)]
    assert lambdas and not [text for text in set(lambdas) if lambdas.count(text) > 1]


def test_a_stage_job_draws_no_progress_bar():
    """A job's log holds its own messages: transformers' "Loading weights" bars are off in a
    stage process (set before transformers is imported)."""
    script = ("import os; os.environ.pop('HF_HUB_DISABLE_PROGRESS_BARS', None)\n"
              "from maskbench.cli import quiet_progress_bars; quiet_progress_bars()\n"
              "import transformers.utils.logging as hf; print(hf.is_progress_bar_enabled())")
    shown = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "False"


@pytest.mark.parametrize("changed, rerun, kept", [
    ("objectives/mlm.py", "pretrain", "download"),
    ("noise.yaml", "report", "pretrain"),  # a declared spread re-renders tables, it re-trains nothing
])
def test_a_code_change_rewrites_the_code_record_of_exactly_the_stages_dvc_reruns(tmp_path, monkeypatch, changed,
                                                                                   rerun, kept):
    """After a one-line change to a source or data file, the stages whose code record (an input
    of each of their Snakemake jobs, maskbench.job_params) is rewritten are those whose dvc.yaml
    entries name the file, so `snakemake -n` and `dvc status` list the same jobs; the records of
    the other stages keep their time, and an unchanged tree rewrites none."""
    import os
    import shutil

    from maskbench import job_params

    package = tmp_path / "src/maskbench"
    shutil.copytree(dvc_yaml.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(dvc_yaml, "PACKAGE", package)
    monkeypatch.setattr(job_params, "PACKAGE", package)
    dvc_yaml.stage_code.cache_clear()  # the copy's imports; cleared again below for the other tests
    try:
        config = load_params(REPO / "params.yaml")
        root = tmp_path / "work"
        first = job_params.write_code_records(root)  # what write_records writes besides the params' records
        assert first == [job_params.code_record_path(name) for name in STAGES]
        assert not job_params.write_code_records(root)

        source = package / changed
        source.write_text(source.read_text() + "\n# a one-line change\n")
        rewritten = set(job_params.write_code_records(root))
        changed = f"src/maskbench/{changed}"
        dvc_jobs = {name for name, stage in dvc_yaml.stages(config)[0].items()
                    if any(changed == dep or changed.startswith(dep + "/") for dep in stage["deps"])}
    finally:
        dvc_yaml.stage_code.cache_clear()
    assert dvc_jobs and {name.split("-")[0] for name in dvc_jobs} == {p.split("/")[-1][:-5] for p in rewritten}
    assert f"logs/code/{rerun}.json" in rewritten and f"logs/code/{kept}.json" not in rewritten
    assert os.stat(root / f"logs/code/{kept}.json").st_mtime == 0  # the others keep the oldest time
    assert changed in json.loads((root / f"logs/code/{rerun}.json").read_text())


@pytest.mark.parametrize("profile, task", [("tiny", None), ("paper", None), ("paper", "rotten_tomatoes")])
def test_only_the_fine_tuning_an_analysis_reads_keeps_its_encoder(raw_params, profile, task):
    """The rank after fine-tuning reads the encoder of the run's fine-tuning on the analysis task
    with the task's first seed, the one fine-tuning job that keeps it (in its outputs, dvc.yaml's
    included): an edge of the stage graph, not a second fine-tuning. On both profiles that job is
    one a table fine-tunes anyway (the paper's rank after MNLI, Fig. 5b, reads table1's MNLI seed);
    on a task no table fine-tunes (Rotten Tomatoes, the paper profile's before), one is added."""
    from maskbench.config import analysis_finetune_task, task_seeds
    from maskbench.plan import dependencies
    from maskbench.stages import analysis_finetune_job, finetune_jobs, job

    raw_params["profile"] = profile
    if task:
        raw_params["profiles"][profile]["analysis"]["finetune_task"]["text"] = task
    config = validate(raw_params, read_yaml(schema_path()))
    analysed = [w["run"] for w in STAGES["analyse"].jobs(config) if analysis_finetune_task(config, w["run"])]
    kept = [analysis_finetune_job(config, run) for run in analysed]
    assert len(kept) == 3 and {w["task"] for w in kept} <= set(config["analysis"]["finetune_task"].values())
    finetunes = [job(config, "finetune", w) for w in finetune_jobs(config)]
    keeping = [j.wildcards for j in finetunes if "encoder" in j.output]
    assert keeping == STAGES["finetune"].keeping_jobs(config) and sorted(map(str, keeping)) == sorted(map(str, kept))
    assert all(j.output.keys() == STAGES["finetune"].outputs.keys() for j in finetunes if j.wildcards not in kept)
    jobs = [("finetune", j.wildcards) for j in finetunes] + [("analyse", {"run": run}) for run in analysed]
    needs = dependencies(config, jobs)
    for i, run in enumerate(analysed):
        inputs = job(config, "analyse", {"run": run}).input
        assert inputs["encoder"] == paths.FINETUNE_ENCODER.format(**kept[i])
        assert {"task", "card", "data_card"}.isdisjoint(inputs)  # it fine-tunes nothing itself
        assert [jobs[n] for n in needs[len(finetunes) + i]] == [("finetune", kept[i])]
    tables = [{**w, "seed": s} for w in STAGES["aggregate"].jobs(config) for s in task_seeds(config, w["task"])]
    assert all(w in tables for w in kept) == (task is None)
    rendered = yaml.safe_load(dvc_yaml.render_dvc_yaml(config))["stages"]
    for w in finetune_jobs(config):
        outs = rendered[STAGES["finetune"].job_name(w)]["outs"]
        assert (paths.FINETUNE_ENCODER.format(**w) in outs) == (w in kept), w
