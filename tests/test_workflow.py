"""Snakemake and DVC describe the same stages: same commands, same inputs, same outputs."""

from __future__ import annotations

import re
import subprocess

import yaml

from maskbench import paths
from maskbench.config import grid_size, load_params, read_yaml, schema_path, stage_params, validate
from maskbench.workflow import CODE, render_dvc_yaml
from tests.conftest import REPO


def snakemake_jobs(workdir) -> dict[str, dict]:
    """Shell command -> {inputs, outputs} of every job of a forced dry run of all tables."""
    result = subprocess.run(["snakemake", "-n", "-F", "-p", "--cores", "1"], cwd=workdir,
                            capture_output=True, text=True, check=True)
    jobs = {}
    for block in re.split(r"\n(?=\[[^\n]*\]\nrule )", result.stdout):
        outputs = re.search(r"^    output: (.*)$", block, re.M)
        command = re.search(r"^Shell command: (.*)$", block, re.M)
        if outputs and command:
            inputs = re.search(r"^    input: (.*)$", block, re.M)
            jobs[command.group(1).strip()] = {
                "outputs": set(outputs.group(1).split(", ")),
                "inputs": set(inputs.group(1).split(", ")) if inputs else set(),
            }
    return jobs


def dvc_stages(text: str) -> dict[str, dict]:
    """Command -> {inputs, outputs} of every stage, less DVC's own validate stage (Snakemake
    validates params.yaml when it reads the Snakefile) and the stamp it writes."""
    code = {path for paths in CODE.values() for path in paths} | {paths.PARAMS_STAMP}
    stages = {}
    for name, stage in yaml.safe_load(text)["stages"].items():
        if name == "validate":
            continue
        outs = set()
        for key in ("outs", "metrics", "plots"):
            outs |= {next(iter(o)) if isinstance(o, dict) else o for o in stage.get(key, [])}
        stages[stage["cmd"]] = {"outputs": outs, "inputs": set(stage["deps"]) - code}
    return stages


def test_committed_dvc_yaml_is_up_to_date():
    assert (REPO / "dvc.yaml").read_text() == render_dvc_yaml(load_params(REPO / "params.yaml")), \
        "dvc.yaml is stale: run `maskbench dvc-yaml`"


def test_no_generated_output_is_committed():
    """A tracked target would look already built to Snakemake on a fresh clone, so it would never run."""
    tracked = subprocess.run(["git", "ls-files", "reports", "runs", "data"], cwd=REPO, capture_output=True,
                             text=True).stdout.split()
    assert not [p for p in tracked if re.fullmatch(r"reports/table\d+\.md|runs/.*|data/(?!cards/).*", p)]


def test_snakemake_and_dvc_describe_the_same_stages(workdir):
    snake = snakemake_jobs(workdir)
    dvc = dvc_stages((workdir / "dvc.yaml").read_text())
    assert snake.keys() == dvc.keys()
    for command in snake:
        assert snake[command]["outputs"] == dvc[command]["outputs"], command
        assert snake[command]["inputs"] == dvc[command]["inputs"], command


def test_equivalence_holds_for_the_paper_profile(workdir):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["profile"] = "paper"
    (workdir / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (workdir / "dvc.yaml").write_text(render_dvc_yaml(load_params(workdir / "params.yaml")))
    jobs = snakemake_jobs(workdir)
    assert jobs.keys() == dvc_stages((workdir / "dvc.yaml").read_text()).keys()
    # the papers' data: Wikipedia + BookCorpus, Uni-Mol's SMILES, all of GLUE, SQuAD 2.0, MoleculeNet
    assert jobs["maskbench tokenizer --modality text"]["inputs"] == {"data/raw/wikipedia", "data/raw/bookcorpus"}
    assert jobs["maskbench tokenizer --modality smiles"]["inputs"] == {"data/raw/unimol_smiles"}
    tasks = {command.split()[-1] for command in jobs if command.startswith("maskbench task ")}
    assert {"mnli", "qqp", "qnli", "sst2", "cola", "rte", "mrpc", "stsb", "squad_v2",
            "bace", "bbbp", "clintox", "hiv", "tox21", "sider", "muv", "toxcast"} <= tasks


def test_paper_profile_dry_runs_the_papers_full_grid(workdir):
    """table1: 3 text runs x (8 GLUE tasks + SQuAD 2.0) x 5 seeds and 2 SMILES runs x 7 MoleculeNet
    sets x 3 seeds; table2: MLM and Repeated MLM x 4 GLUE tasks x 3 seeds (ExLM Tab. 6). Each text
    job searches its task's grid (ExLM Tab. 11, MAE-LM Tab. 4-5)."""
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["profile"] = "paper"
    (workdir / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    config = load_params(workdir / "params.yaml")
    finetunes = [c for c in snakemake_jobs(workdir) if c.startswith("maskbench finetune ")]
    assert len(finetunes) == 3 * 9 * 5 + 2 * 7 * 3 + 2 * 4 * 3
    grids = {t: grid_size(config, t) for t in config["tables"]["table1"]["tasks"] + config["tables"]["table2"]["tasks"]}
    assert {t: grids[t] for t in ("mnli", "qqp", "qnli", "sst2")} == dict.fromkeys(("mnli", "qqp", "qnli", "sst2"), 4 * 3)
    assert {t: grids[t] for t in ("cola", "rte", "mrpc", "stsb")} == dict.fromkeys(("cola", "rte", "mrpc", "stsb"), 4 * 2 * 4 * 2)
    assert grids["squad_v2"] == 4 * 2 * 2 * 2
    assert all(grids[t] == 1 for t in ("bace", "bbbp", "tox21", "sider", "muv", "clintox", "toxcast", "rmlm_rte"))


def test_every_dvc_stage_depends_on_validation_and_reads_only_its_keys(workdir):
    stages = yaml.safe_load((workdir / "dvc.yaml").read_text())["stages"]
    assert stages["validate"]["params"] == [{"params.yaml": None}]
    assert all(paths.PARAMS_STAMP in stage["deps"] for name, stage in stages.items() if name != "validate")
    finetune = stages["finetune-mlm-rotten_tomatoes-seed1"]["params"]
    assert "finetune.settings" in finetune and "tasks.rotten_tomatoes.metric" in finetune
    assert not [key for key in finetune if key.endswith(".label") or key.startswith(("tables", "tracking", "finetune.seeds"))]
    assert stages["download-wikitext2"]["params"] == ["profile", *stage_params(load_params(workdir / "params.yaml"),
                                                                              "download", "wikitext2")]


def test_stage_params_follow_the_profile_and_skip_unset_keys(raw_params):
    raw_params["profile"] = "paper"
    config = validate(raw_params, read_yaml(schema_path(REPO / "params.yaml")))
    assert "tasks.cola.grid" in stage_params(config, "finetune", "mlm/cola")
    assert "tasks.rte.overrides" not in stage_params(config, "finetune", "mlm/rte")
    assert stage_params(config, "pretrain", "smiles_mlm")[-1] == "model_sizes.base-smiles"
    stages = yaml.safe_load(render_dvc_yaml(config))["stages"]
    # keys only the paper profile writes are named under profiles.paper, never at the top level
    assert "profiles.paper.tasks.cola.grid" in stages["finetune-mlm-cola-seed1"]["params"]
    assert "tasks.cola.grid" not in stages["finetune-mlm-cola-seed1"]["params"]


def test_config_overrides_are_refused(workdir):
    result = subprocess.run(["snakemake", "-n", "--cores", "1", "--config", "profile=paper"], cwd=workdir,
                            capture_output=True, text=True)
    assert result.returncode != 0 and "edit params.yaml" in result.stdout + result.stderr
