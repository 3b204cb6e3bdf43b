"""The predictions behind a table's verdicts, read and rescored once per task.

Every seed of a (run, task) cell wrote `predictions.jsonl` (maskbench.finetune.loop): class
probabilities, values or per-task probabilities with their labels, or, for QA, thresholded
answers with their gold answers. Here they become the arms of `maskbench.eval.verdict`: rows
of the reported split (test where the predictions have it, else dev, as `aggregate` reports),
ordered by example, rescored on the task's example draws. An arm is `Missing`, with the
reason, when a seed's file is missing or scored other examples than the task's first arm;
nothing is guessed in its place. A run's arm holds every pretraining seed of it (`mlm`,
`mlm-pseed1`, ...: `pretrain.seeds`), each with its fine-tuning seeds, so the verdicts resample
both levels.

Two questions are asked of the arms. Is one recipe better than another (`compare`: the claims)?
Then an arm of few pretraining seeds adds the pretraining spread declared for the task
(`declared`: `maskbench.power.declared_spread`, noise.yaml), as another pretraining run of its
recipe would land elsewhere; none declared, a one-seed comparison is not decided.
Did this run learn the task, better than `none` or a baseline, or than its own probe
(`compare_runs`, `compare_to_baseline`, `probe_against_run`)? That is a question about the
encoder built, so it is answered conditional on its pretraining run.

Each seed's file holds the predictions of that seed's own best grid point; the summary's
centre comes from the point with the best median dev score over seeds. With a one-point grid
(the `tiny` profile) the two are the same; over a grid they can differ.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from maskbench import paths
from maskbench.config import pretraining_runs, pretrains, task_seeds
from maskbench.eval.metrics import SPAN_METRICS, higher_is_better
from maskbench.eval.verdict import (
    ArmPretraining,
    Comparison,
    DeclaredSpread,
    compare,
    draw_examples,
    headline_score,
    question_scores,
    resampled_scores,
)
from maskbench.io import read_jsonl, reading
from maskbench.report.missing import Missing


class TaskEvidence:
    """One task's arms, rescored on the same example draws (`verdicts` in params.yaml:
    `bootstrap` resamples, `confidence`, `seed`), and the pretraining spread declared for the
    task (None: none declared)."""

    def __init__(self, config: dict, task: str, root: Path, declared: DeclaredSpread | None = None):
        self.config, self.task, self.root, self.declared = config, task, root, declared
        self.metric = config["tasks"][task]["metric"]
        self.settings = config["verdicts"]
        self.split: str | None = None
        self.keys: list | None = None
        self.indices: np.ndarray | None = None
        self.labels: np.ndarray | None = None
        self._arms: dict[str, np.ndarray | Missing] = {}

    def arm(self, run: str) -> np.ndarray | Missing:
        """The declared run's `resampled_scores` (pretraining seeds, fine-tuning seeds,
        1 + resamples), or why they are not computed."""
        if run not in self._arms:
            self._arms[run] = self._rescore(run)
        return self._arms[run]

    def baseline(self, name: str) -> np.ndarray | Missing:
        """A baseline of `runs/baseline/{task}/predictions.jsonl` as an arm of one seed (its
        predictions are fixed), or why it is not computed. Rescored on the examples the runs'
        predictions fix, so ask for a run's arm first."""
        key = f"baseline {name}"
        if key not in self._arms:
            path = self.root / paths.BASELINE_PREDICTIONS.format(task=self.task)
            self._arms[key] = self._rescore_fixed(path, key, lambda r: r["baseline"] == name)
        return self._arms[key]

    def probe(self, run: str) -> np.ndarray | Missing:
        """The frozen-feature probes of `run`'s encoders (`runs/probe/{run}/{task}/predictions.jsonl`,
        one per pretraining seed) as an arm of one fine-tuning seed per pretraining seed, or why
        it is not computed; ask for a run's arm first, as for a baseline."""
        key = f"probe {run}"
        if key not in self._arms:
            probes = [self._rescore_fixed(self.root / paths.PROBE_PREDICTIONS.format(run=instance, task=self.task),
                                          f"probe {instance}", lambda r: True)
                      for instance in pretraining_runs(self.config, run)]
            missing = next((why for why in probes if isinstance(why, Missing)), None)
            self._arms[key] = missing or np.stack(probes)
        return self._arms[key]

    def compare(self, a: str, b: str) -> Comparison | Missing:
        """The recipe of run `a` against that of run `b` on this task (each run with few
        pretraining seeds adding its declared spread), or why it cannot be said."""
        return self._compare({a: self.arm(a), b: self.arm(b)}, (self.pretraining(a), self.pretraining(b)))

    def compare_runs(self, a: str, b: str) -> Comparison | Missing:
        """Run `a` against run `b` as built (did `a` learn more than `b`, e.g. the `none`
        control): conditional on their pretraining runs, or why it cannot be said."""
        return self._compare({a: self.arm(a), b: self.arm(b)})

    def pretraining(self, run: str) -> ArmPretraining:
        """`run`'s pretraining in a comparison of recipes on this task (`verdict.ArmPretraining`):
        None for a run that does not pretrain, else the task's declared spread (or None)."""
        return [self.declared] if pretrains(self.config, run) else None

    def compare_to_baseline(self, run: str, name: str) -> Comparison | Missing:
        """Run `run` against the baseline `name` on this task, or why it cannot be said."""
        return self._compare({run: self.arm(run), f"baseline {name}": self.baseline(name)})

    def probe_against_run(self, run: str) -> Comparison | Missing:
        """The probe of `run`'s frozen encoder against the run fine-tuned (a: the probe), or why
        it cannot be said: a probe better beyond the noise means fine-tuning lost what
        pretraining learned."""
        fine_tuned = self.arm(run)
        return self._compare({f"probe {run}": self.probe(run), run: fine_tuned})

    def _compare(self, arms: dict[str, np.ndarray | Missing],
                 declared: tuple[ArmPretraining, ArmPretraining] = (None, None)) -> Comparison | Missing:
        missing = [f"`{run}` ({why})" for run, why in arms.items() if isinstance(why, Missing)]
        if missing:
            return Missing("; ".join(missing))
        s = self.settings
        a, b = arms.values()
        return compare(a, b, higher_is_better(self.metric), s["confidence"], s["seed"], declared)

    def _rescore_fixed(self, path: Path, what: str, keep) -> np.ndarray | Missing:
        """The rows of `path` that `keep` selects, one fixed prediction per example (a baseline,
        a probe), as an arm of one seed on the runs' examples."""
        if not path.exists():
            return Missing(f"no {what} predictions ({path})")
        if self.keys is None:
            return Missing(f"no run's predictions to pair the {what} with")
        with reading(path):
            rows = sorted((r for r in read_jsonl(path) if keep(r) and r["split"] == self.split), key=_key)
        if [_key(r) for r in rows] != self.keys:
            return Missing(f"{what} scored other {self.split} examples than the runs")
        return resampled_scores(headline_score(self.metric, self.labels), [self._outputs(rows)], self.indices)

    def _rescore(self, run: str) -> np.ndarray | Missing:
        """Every pretraining seed of `run`, each with its fine-tuning seeds, or the first reason
        one is not computed."""
        instances = [self._rescore_instance(instance) for instance in pretraining_runs(self.config, run)]
        missing = next((why for why in instances if isinstance(why, Missing)), None)
        return missing or np.stack(instances)

    def _rescore_instance(self, run: str) -> np.ndarray | Missing:
        files = {seed: self.root / paths.FINETUNE_PREDICTIONS.format(run=run, task=self.task, seed=seed)
                 for seed in task_seeds(self.config, self.task)}
        absent = [seed for seed, path in files.items() if not path.exists()]
        if absent:
            return Missing(f"no predictions of {_instance(self.config, run)}seed {', '.join(map(str, absent))}")
        seeds = []
        for seed, path in files.items():
            with reading(path):
                records = read_jsonl(path)
            if self.split is None:
                self.split = "test" if any(r["split"] == "test" for r in records) else "dev"
            rows = sorted((r for r in records if r["split"] == self.split), key=_key)
            if self.keys is None:
                self._first_arm(rows)
            if [_key(r) for r in rows] != self.keys:
                return Missing(f"{_instance(self.config, run)}seed {seed} scored other {self.split} examples "
                               "than the task's other runs")
            seeds.append(self._outputs(rows))
        return resampled_scores(headline_score(self.metric, self.labels), seeds, self.indices)

    def _first_arm(self, rows: list[dict]) -> None:
        """The examples every arm of the task must have scored, their labels and the draws."""
        if not rows:
            raise ValueError(f"{self.task}: predictions without any {self.split} row")
        self.keys = [_key(r) for r in rows]
        self.labels = (np.array([]) if self.metric in SPAN_METRICS else
                       np.array([_nan_for_none(r["label"]) for r in rows], dtype=np.float64))
        # each task its own draws, so a mean over tasks resamples their examples independently
        self.indices = draw_examples(len(rows), self.settings["bootstrap"],
                                     [self.settings["seed"], zlib.crc32(self.task.encode())])

    def _outputs(self, rows: list[dict]) -> np.ndarray:
        if self.metric in SPAN_METRICS:
            return question_scores(self.metric, [r["prediction"] for r in rows], [r["gold"] for r in rows])
        return np.array([r["prediction"] for r in rows], dtype=np.float64)


def _instance(config: dict, run: str) -> str:
    """"`mlm-pseed1` " before a fine-tuning seed of a pretraining seed's instance in a message,
    "" for the declared run itself."""
    return f"`{run}` " if "seed_of" in config["runs"][run] else ""


def _key(record: dict):
    """What names an example: the question id (QA) or the row index in its split."""
    return record["id"] if "id" in record else record["index"]


def _nan_for_none(label):
    """A missing label (null in JSON) as NaN, as the metrics expect."""
    if isinstance(label, list):
        return [np.nan if v is None else v for v in label]
    return np.nan if label is None else label
