"""Helpers shared by the tests, as plain functions and constants (the fixtures are in conftest.py,
the data samples in samples.py): the workflow copied and run, the files stages read and write, an
objective's seeded step, small configs, models and corpora, and a stand-in for the Hugging Face hub.
Test modules import these from here, never from conftest.py or another test module (test_layout.py
checks). Torch, the model and the training loops, which take seconds to import, are imported where
they are used (the objectives' torch-built helpers on first use, `torch_helpers`), so that a test
module needing none of them does not wait for them."""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import yaml

from maskbench import paths
from maskbench.config import read_params, read_yaml, schema_path, validate
from maskbench.objectives.cards import CARDS

REPO = Path(__file__).resolve().parents[1]

# Every objective, from its card (src/maskbench/objectives/cards.py): the tests parametrised by
# objective take these lists, so a new card is tested without a test file naming it.
OBJECTIVE_NAMES = sorted(CARDS)
PRETRAINED_OBJECTIVES = sorted(name for name, card in CARDS.items() if card.pretrains)
# Knobs of each objective's test model, over its card's defaults: small (one decoder layer) and
# masking a quarter of a 16-token block. An objective left out is tested at its card's defaults.
TEST_KNOBS = {"mlm": {"mask_ratio": 0.25}, "repeated_mlm": {"k": 2, "mask_ratio": 0.25},
              "mae_lm": {"mask_ratio": 0.25, "decoder_layers": 1, "delta": 0.0},
              "exlm": {"k": 2, "mask_ratio": 0.25}, "dar": {"t": 2}}


def objective_run(objective: str, knobs: dict | None = None) -> dict:
    """A `runs.<name>` entry of `objective` with its test knobs (`knobs` in their place)."""
    return {"objective": objective, "knobs": TEST_KNOBS.get(objective, {}) if knobs is None else knobs}


def copy_workflow(path: Path) -> Path:
    """What a fresh clone has of the workflow (rules, params, code), copied to `path`, and the
    dvc.yaml `maskbench dvc-yaml` generates there for the default profile (no profile chosen:
    params.yaml's own `profile:` decides, and an edit of it switches)."""
    from maskbench.dvc_yaml import render_dvc_yaml

    path.mkdir(parents=True)
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(REPO / name, path / name)
    for name in ("workflow", "src"):
        shutil.copytree(REPO / name, path / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    config = read_params(path / "params.yaml")[1]
    (path / "dvc.yaml").write_text(render_dvc_yaml(config, path / "params.yaml"))
    return path


def smoke_copy(path: Path) -> Path:
    """A copy of the workflow (what a fresh clone has) switched to the smoke profile."""
    copy_workflow(path)
    run(["maskbench", "profile", "smoke"], path)  # the smoke profile's tables need other stages
    return path


def copy_build(build: Path, dest: Path) -> Path:
    """A copy of a built project that keeps the files' times, so Snakemake sees it as built."""
    shutil.copytree(build, dest, symlinks=True)
    return dest


_VALIDATED: dict[str, dict] = {}


def validated(raw: dict) -> dict:
    """`raw` validated as `maskbench.config.validate` does (the schema on every profile, ~0.25 s),
    once a session for each distinct parameters and objective cards, each caller given its own
    copy: for tests that need a valid config, not the checks' verdict on a new one."""
    key = json.dumps([raw, repr(sorted(CARDS.items()))], sort_keys=True, default=repr)
    if key not in _VALIDATED:
        _VALIDATED[key] = validate(copy.deepcopy(raw), read_yaml(schema_path()))
    return copy.deepcopy(_VALIDATED[key])


def figures_unwritten(monkeypatch) -> None:
    """The report's figures drawn but not written: rasterising a PNG is most of what rendering a
    table costs. For tests of a table's text and verdicts; tests of the figures leave it out."""
    from maskbench.report import figures

    monkeypatch.setattr(figures, "_save", lambda fig, path: figures.plt.close(fig))


def write_params(workdir: Path, params: dict) -> Path:
    path = workdir / "params.yaml"
    path.write_text(yaml.safe_dump(copy.deepcopy(params), sort_keys=False))
    return path


def write_summary(root: Path, run: str, task: str, summary: dict) -> None:
    """A fine-tuning summary where the report stage looks for it."""
    path = root / paths.FINETUNE_SUMMARY.format(run=run, task=task)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(summary))


def finetune_outputs(out_dir: Path) -> tuple[Path, Path]:
    """The metrics and predictions files `finetune` writes, under `out_dir`."""
    return out_dir / "metrics.json", out_dir / "predictions.jsonl"


def seeded_draws(objective, tokens, seed: int) -> dict:
    """The objective's random choices for `tokens`, drawn from a generator seeded with `seed`."""
    import torch

    return objective.draw(tokens, torch.Generator().manual_seed(seed))


def objective_step(objective, tokens, seed: int):
    """One training step's output, as pretraining makes it: the objective's random choices
    drawn from a generator seeded with `seed`, then its loss given them."""
    return objective(tokens, seeded_draws(objective, tokens, seed))


def objective_inspection(objective, tokens, seed: int, hidden_states: bool = False):
    """What the analyses read of the step `objective_step` takes with the same `seed`."""
    return objective.inspect(tokens, seeded_draws(objective, tokens, seed), hidden_states)


def tiny_documents() -> dict[str, list[str]]:
    """40 train, 5 valid and 5 test documents of 60 random words (seeded: the same every run)."""
    rng = np.random.default_rng(0)
    words = "the cat sat on mat while a dog ran in park and bird sang".split()
    return {s: [" ".join(rng.choice(words, 60)) for _ in range(n)]
            for s, n in (("train", 40), ("valid", 5), ("test", 5))}


def write_tiny_corpus(tokenizer, tokens: Path, tokenizer_dir: Path, card: Path) -> None:
    """`tiny_documents` as the data stages leave a corpus: token streams, tokenizer, download card."""
    from maskbench.data.corpus import tokenize_corpus

    tokenize_corpus(tiny_documents(), tokenizer, tokens)
    tokenizer.save_pretrained(tokenizer_dir)
    card.parent.mkdir(parents=True, exist_ok=True)
    card.write_text(json.dumps({"source": {"files": {"train.raw.gz": "0" * 64}}}))


def pretrain_workdir(root: Path, tokenizer, **pretrain) -> Path:
    """A workflow copy under the smoke profile (40 steps, a checkpoint every 5, or the `pretrain`
    settings given) whose data stages have run on the tiny corpus: what `maskbench pretrain` reads."""
    root.mkdir(parents=True)
    shutil.copytree(REPO / "workflow", root / "workflow")
    params = copy.deepcopy(RAW_PARAMS)
    params["profile"] = "smoke"
    params["profiles"]["smoke"]["pretrain"].update({"steps": 40, "checkpoint_every": 5, "seq_len": 32, **pretrain})
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    write_tiny_corpus(tokenizer, root / "data/tokens/text", root / "data/tokenizer/text",
                      root / "data/cards/download-wikitext2.json")
    return root


# `maskbench <argv>` that sends itself `signum` during the `at_step`-th optimizer step of the
# loop in `module` (pretraining's or fine-tuning's): a signal sent from outside after a sleep or
# a poll races training, which on a fast machine runs the smoke profile's 150 steps within a second.
_SIGNALLED = """
import os, runpy, sys
import {module} as loop
step_once, calls = loop.optimizer_step, []
def step_then_signal(*args, **kwargs):
    calls.append(1)
    if len(calls) == {at_step}:
        os.kill(os.getpid(), {signum})
    return step_once(*args, **kwargs)
loop.optimizer_step = step_then_signal
sys.argv = {argv!r}
runpy.run_module("maskbench.cli", run_name="__main__")
"""


def stage_signalled(root: Path, module: str, argv: list[str], signum: int, at_step: int,
                    env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `maskbench <argv>` in `root`, sending the process `signum` while the `at_step`-th
    step of `module`'s loop runs. The script imports torch before the CLI could pin its CPU
    paths, so under `cpu_arithmetic: reproducible` the process starts pinned (maskbench.cpu_mode),
    as a `maskbench` command would be by the time it computes."""
    from maskbench.config import read_params
    from maskbench.cpu_mode import PINS

    script = _SIGNALLED.format(module=module, argv=["maskbench", *argv], at_step=at_step, signum=int(signum))
    if read_params(str(root / "params.yaml"))[1]["cpu_arithmetic"] == "reproducible":
        env = {**(os.environ if env is None else env), **PINS}
    return subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, env=env)


def pretrain_signalled(root: Path, signum: int, at_step: int) -> subprocess.CompletedProcess:
    """Pretrain `mlm` in `root`, sending the process `signum` while its `at_step`-th step runs."""
    return stage_signalled(root, "maskbench.train.pretrain", ["pretrain", "--run", "mlm"], signum, at_step)


def task_files(root: Path, rows_by_split: dict, kind: str, label_names=None) -> None:
    """A task as the task stage leaves it, under `root`: task/<split>.jsonl, card.json, download.json."""
    (root / "task").mkdir(parents=True)
    for split, rows in rows_by_split.items():
        (root / "task" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "card.json").write_text(json.dumps({"kind": kind, "label_names": label_names}))
    (root / "download.json").write_text(json.dumps({"source": {"files": {"x": "0" * 64}}}))


class FakeHubSplit(list):
    """What `datasets.load_dataset` returns per split, as far as the `hf` source uses it."""

    def to_json(self, path, lines, force_ascii):
        Path(path).write_text("".join(json.dumps(r) + "\n" for r in self))


def fake_hub(monkeypatch, hub: dict):
    """`datasets.load_dataset` serves `hub` ({(repo, config): {split: records}}); returns its calls."""
    calls = []

    def load_dataset(repo, config=None, revision=None):
        calls.append((repo, config, revision))
        return {split: FakeHubSplit(records) for split, records in hub[repo, config].items()}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def run(cmd: list[str], cwd: Path) -> str:
    """Run `cmd` in `cwd`; fail the test with the end of its output unless it succeeds."""
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout + result.stderr


# --- pretraining and fine-tuning on the smoke profile ---------------------------------------------

RAW_PARAMS = read_yaml(REPO / "params.yaml")  # as read: copy it before changing it


def smoke_config(**pretrain_settings) -> dict:
    """params.yaml under its smoke profile, cut to a few steps, with a `probe` fine-tuning task."""
    raw = copy.deepcopy(RAW_PARAMS)
    raw["profile"] = "smoke"
    for spec in raw["runs"].values():  # a run's own length (MLM++: twice the steps) is cut too
        for key in ("steps", "warmup_steps"):
            spec.get("overrides", {}).pop(key, None)
    smoke = raw["profiles"]["smoke"]
    smoke["pretrain"].update({"steps": 3, "warmup_steps": 1, "checkpoint_every": 2, "log_every": 1, "seq_len": 32,
                              "batch_size": 4, "micro_batch_size": 4, "device": "cpu",
                              **pretrain_settings})
    smoke["finetune"]["settings"].update(epochs=1, batch_size=4, max_len=24, max_train_examples=None,
                                         threads=1, device="cpu")
    raw["tasks"]["probe"] = {"dataset": "rotten_tomatoes", "modality": "text", "label": "probe",
                             "kind": "classification", "metric": "accuracy",
                             "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}}
    return validated(raw)


def run_pretrain(config, run, corpus, out_dir) -> dict:
    from maskbench.train.pretrain import PretrainFiles, pretrain

    files = PretrainFiles(model=out_dir / "model", metrics=out_dir / "metrics.json", log_csv=out_dir / "log.csv",
                          valid_csv=out_dir / "valid.csv", checkpoint=out_dir / "checkpoint",
                          objective=out_dir / "objective.safetensors")
    return pretrain(config, run, corpus / "tokens", corpus / "tokenizer", [corpus / "card.json"], files)


def config_with_profile(raw_params, profile):
    """params.yaml (raw, as read) under `profile`, validated."""
    raw_params["profile"] = profile
    return validated(raw_params)


def declare_pretraining_spread(monkeypatch, config, sd: float, seeds: int = 25) -> None:
    """noise.yaml as the verdicts read it (`maskbench.power.load_noise`), with every task's dataset
    declaring a pretraining spread of `sd` points measured on `seeds` seeds: for tests of how
    verdicts render, whose synthetic runs have one pretraining seed each."""
    from maskbench import power

    entry = {"pretraining_sd": sd, "finetuning_sd": 1.0, "example_sd": 40.0, "status": "measured",
             "pretraining_seeds": seeds, "source": "a test's declaration"}
    found = {**copy.deepcopy(power.load_noise()),
             "datasets": {spec["dataset"]: entry for spec in config["tasks"].values()}}
    monkeypatch.setattr(power, "load_noise", lambda: found)


def declare_measure_spread(monkeypatch, config, measure: str, sd: float | None, seeds: int = 3, runs: int = 3) -> None:
    """noise.yaml as the claims on analysis measures read it (`maskbench.power.load_noise`, as
    patched so far), with `measure` declaring a spread of `sd` (in its unit) between pretraining
    seeds on every corpus of `config`, measured on `seeds` seeds of `runs` runs; None: on none."""
    from maskbench import power

    entry = {"pretraining_sd": sd, "pretraining_seeds": seeds, "runs": runs, "status": "measured",
             "source": "a test's declaration"}
    found = copy.deepcopy(power.load_noise())
    found.setdefault("measures", {})[measure] = {name: entry for name, spec in config["datasets"].items()
                                                if spec["role"] == "corpus" and sd is not None}
    monkeypatch.setattr(power, "load_noise", lambda: found)


def few_seed_correction_dropped(monkeypatch) -> None:
    """A mutant of the noise rule (`maskbench.eval.verdict`): a plain bootstrap standard error and
    a normal quantile, the drawn seeds' deviations not scaled up, no Student t. The error-rate
    tests show they catch it."""
    from maskbench.eval import verdict

    monkeypatch.setattr(verdict, "_inflated", lambda units, drawn: units[
        drawn, np.arange(1, drawn.shape[0] + 1)[:, None]].mean(axis=1))
    monkeypatch.setattr(verdict, "satterthwaite", lambda total, parts: math.inf)


def config_with_probe_task(raw_params, task_spec):
    """params.yaml (raw, as read) with a `probe` task of `task_spec` and a short fine-tuning, validated."""
    raw_params["tasks"]["probe"] = {"dataset": "rotten_tomatoes", "modality": "text", "label": "probe",
                                    **task_spec}
    raw_params["finetune"]["settings"].update(epochs=1, batch_size=4, max_len=24, max_train_examples=None,
                                              doc_stride=8, threads=1)
    return validated(raw_params)


def checkpoint(objective_name: str, tokenizer, out_dir):
    """One training step of the objective, saved the way `pretrain` saves an encoder."""
    import torch

    from maskbench.model.encoder import Encoder, EncoderConfig
    from maskbench.objectives.base import SpecialTokens
    from maskbench.objectives.registry import build_objective, encoder_settings

    run = objective_run(objective_name)
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(vocab_size=len(tokenizer), n_layer=1, n_embd=32, n_head=2, n_inner=64,
                                    pad_token_id=tokenizer.pad_token_id, **encoder_settings(run, 32, "rope")))
    objective = build_objective(run, encoder, SpecialTokens.from_tokenizer(tokenizer))
    tokens = torch.randint(5, len(tokenizer), (4, 32))
    tokens[:, 0], tokens[:, -1] = tokenizer.cls_token_id, tokenizer.sep_token_id
    objective_step(objective, tokens, 0).loss.backward()
    encoder.config.pretraining = {**objective.pretraining_info(), "run": objective_name}
    encoder.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


GRID = {"C": [0.01, 1.0, 100.0], "alpha": [0.1, 10.0], "max_iter": 500}


def with_task(config: dict, name: str, modality: str, kind: str, metric: str) -> dict:
    config["tasks"][name] = {"dataset": "x", "modality": modality, "kind": kind, "metric": metric,
                             "label": name, "split": {"method": "random", "dev": 0.1, "test": 0.1, "seed": 0}}
    config["controls"] = GRID
    return config


def tiny_encoder(tokenizer, out_dir, objective="mlm"):
    import torch

    from maskbench.model.encoder import Encoder, EncoderConfig

    torch.manual_seed(0)
    position = {"ar": {}}.get(objective, {})
    encoder = Encoder(EncoderConfig(vocab_size=len(tokenizer), n_layer=2, n_embd=16, n_head=2, n_inner=32,
                                    max_position=64, pad_token_id=tokenizer.pad_token_id, **position))
    encoder.config.pretraining = {"objective": objective, "run": objective}
    encoder.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return encoder


# --- report evidence ----------------------------------------------------------------------------

N = 150
TRUTH = {"roc_auc": np.random.default_rng(0).integers(0, 2, (N, 1)).astype(float),
         "rmse": np.random.default_rng(1).normal(size=N)}


def write_predictions(root, run, task, metric, noise):
    """Three seeds' test predictions: the truth plus noise of scale `noise` (smaller: better)."""
    truth = TRUTH[metric]
    for seed in (1, 2, 3):
        outputs = truth + np.random.default_rng([seed, *run.encode(), *task.encode()]).normal(scale=noise,
                                                                                                size=truth.shape)
        path = root / paths.FINETUNE_PREDICTIONS.format(run=run, task=task, seed=seed)
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps({"split": "test", "index": i, "prediction": o.tolist(),
                                            "label": y.tolist()}) + "\n" for i, (o,
                                                                                 y) in enumerate(zip(outputs, truth))))


# --- the workflow's jobs and products -----------------------------------------------------------

def snakemake_jobs(workdir, *targets) -> dict[str, dict]:
    """Command -> {inputs, outputs, log} of every job of a forced dry run (all targets by default)."""
    result = subprocess.run(["snakemake", "-n", "--forceall", "-p", "--cores", "1", *targets], cwd=workdir,
                            capture_output=True, text=True, check=True)
    jobs = {}
    for block in re.split(r"\n(?=\[[^\n]*\]\nrule )", result.stdout):
        outputs = re.search(r"^    output: (.*)$", block, re.M)
        command = re.search(r"^Shell command: (.*) --log (\S+)$", block, re.M)
        if outputs and command:
            inputs = re.search(r"^    input: (.*)$", block, re.M)
            log = re.search(r"^    log: (.*)$", block, re.M)
            assert log and log.group(1) == command.group(2), "the shell command logs to the rule's log file"
            jobs[command.group(1).strip()] = {
                "outputs": set(outputs.group(1).split(", ")),
                "inputs": set(inputs.group(1).split(", ")) if inputs else set(),
                "log": log.group(1),
            }
    return jobs


def use_profile(workdir, profile: str) -> dict:
    from maskbench.dvc_yaml import render_dvc_yaml

    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["profile"] = profile
    write_params(workdir, params)
    (workdir / "profile.yaml").write_text(f"profile: {profile}\n")  # as `maskbench profile` chooses it
    raw, config = read_params(workdir / "params.yaml")
    (workdir / "dvc.yaml").write_text(render_dvc_yaml(config, workdir / "params.yaml"))
    return config


PRODUCTS = ("data/raw", "data/cards", "data/tokenizer", "data/tokens", "data/tasks", "runs", "reports")


def products(root: Path) -> dict[str, str]:
    """Every output file (minus Snakemake's own directory timestamps) and its sha256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in PRODUCTS for p in (root / d).rglob("*") if p.is_file() and p.name != ".snakemake_timestamp"}


# --- objectives on a 40-token vocabulary --------------------------------------------------------

VOCAB = 40
SEQ_LEN = 16
TORCH_HELPERS = ("SPECIALS", "WITH_UNK", "Spy")


@functools.cache
def torch_helpers() -> dict:
    """The helpers built on torch, made on first use: the special ids of the 40-token vocabulary
    (`SPECIALS`; `WITH_UNK` adds [UNK], ExLM's per-[MASK] CTC blank) and `Spy`, an encoder
    wrapper that records the ids it is called with."""
    import torch

    from maskbench.objectives.base import SpecialTokens

    class Spy(torch.nn.Module):
        """Records the ids the wrapped encoder is called with."""

        def __init__(self, encoder):
            super().__init__()
            self.inner, self.calls = encoder, []

        def forward(self, input_ids, **kwargs):
            self.calls.append((input_ids, kwargs))
            return self.inner(input_ids, **kwargs)

        def __getattr__(self, name):
            try:
                return super().__getattr__(name)
            except AttributeError:
                return getattr(self.inner, name)

    return {"SPECIALS": SpecialTokens(pad=0, cls=1, sep=2, mask=3),
            "WITH_UNK": SpecialTokens(pad=0, cls=1, sep=2, mask=3, unk=4), "Spy": Spy}


def __getattr__(name: str):
    """`from tests.helpers import SPECIALS` (or another of `TORCH_HELPERS`) makes them then."""
    if name in TORCH_HELPERS:
        return torch_helpers()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make(objective: str, knobs: dict | None = None, seq_len: int = SEQ_LEN, seed: int = 0, positions: str = "rope",
         specials=None):
    """A small encoder (two layers of 32) under `objective` with its test knobs (`knobs` in their
    place), its special ids `specials` (`SPECIALS` unless given)."""
    import torch

    from maskbench.model.encoder import Encoder, EncoderConfig
    from maskbench.objectives.registry import build_objective, encoder_settings

    torch.manual_seed(seed)
    run = objective_run(objective, knobs)
    config = EncoderConfig(vocab_size=VOCAB, n_layer=2, n_embd=32, n_head=2, n_inner=64, dropout=0.0,
                           **encoder_settings(run, seq_len, positions))
    return build_objective(run, Encoder(config), specials or torch_helpers()["SPECIALS"])


def blocks(batch: int = 4, seq_len: int = SEQ_LEN, seed: int = 0):
    import torch

    specials = torch_helpers()["SPECIALS"]
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, VOCAB, (batch, seq_len), generator=g)
    tokens[:, 0], tokens[:, -1] = specials.cls, specials.sep
    return tokens


def brute_force_log_z(log_emit, log_trans):
    """log Σ over paths 0 < u_1 < … < u_M < L-1 of Π E · Π P_{u_i}(y_i): every path, spelled out."""
    import torch

    B, m, L = log_emit.shape
    totals = []
    for b in range(B):
        terms = []
        for path in itertools.combinations(range(1, L - 1), m):
            nodes = (0, *path, L - 1)
            edges = sum(log_trans[b, v, u] for v, u in zip(nodes, nodes[1:]))
            terms.append(edges + sum(log_emit[b, i, u] for i, u in enumerate(path)))
        totals.append(torch.logsumexp(torch.stack(terms), dim=0))
    return torch.stack(totals)


def smoke_reports_jobs() -> int:
    """The job count of smoke's `reports` as the README's Quick start gives it (one source: the
    slow test that dry-runs the target checks it against Snakemake's plan)."""
    found = re.search(r"every table on smoke \((\d+) jobs", (REPO / "README.md").read_text())
    return int(found.group(1))


def two_disjoint_routes():
    """Two routes 0 -> 1 -> 3 -> 5 and 0 -> 2 -> 4 -> 5. After step 1 the first leads by 800
    nats and both reach the end, but step 2 reverses that by 1000 nats: no single shift per step
    keeps the second route's factors in float64 range (its u-side factor would be e^800).
    The alignment tests' extreme case (reference and host twin)."""
    import torch

    log_emit = torch.full((1, 2, 6), -2000.0, dtype=torch.float64)
    log_emit[0, 0, 1], log_emit[0, 0, 2] = 0.0, -800.0
    log_emit[0, 1, 3], log_emit[0, 1, 4] = -1000.0, 0.0
    log_trans = torch.full((1, 6, 6), float("-inf"), dtype=torch.float64)
    for v, u in [(0, 1), (0, 2), (1, 3), (2, 4), (3, 5), (4, 5)]:
        log_trans[0, v, u] = 0.0
    return log_emit, log_trans
