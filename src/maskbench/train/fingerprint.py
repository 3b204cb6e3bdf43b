"""Whether a checkpoint may be resumed: the settings that change what a run computes, and the
ones that only change how it is run.

A checkpoint records everything its run was computed from (`inputs`: the run's spec, its
settings, the model size, the data's meta.json; for fine-tuning, the grid and the bytes of the
model and task). When the job starts again, a difference in an *operational* setting resumes the
checkpoint and is logged (and recorded in the checkpoint, then in metrics.json as
`resumed_with`); a difference in anything else refuses, naming each setting with its old and new
value and the way out, and leaves the checkpoint as it is. Nothing is thrown away silently: a
40-hour run is not lost because the next node has another core count.

Operational, and why each leaves the result as it is:
- `threads`, `device`, `compile`: where and how the same arithmetic runs (up to the order of
  floating-point sums: a resumed run matches an uninterrupted one within rounding);
- `log_every`, `eval_every`, `checkpoint_every`: what is written down; evaluation draws no
  random numbers and training reseeds its generators every step;
- `micro_batch_size`, the global `batch_size` unchanged: the same sequences and masks make each
  step's update. Not bit for bit: a loss is averaged per micro-batch and dropout is seeded per
  micro-batch, so the continuation is the same optimisation with another split of its sums (and,
  with dropout, other dropout draws). This is what lets a run resume on a GPU with less memory
  (`maskbench plan` proposes the micro-batch that fits); the change is logged and kept in
  metrics.json's `resumed_with`.
The number of processes was never part of the fingerprint (docs/scaling.md).
"""

from __future__ import annotations

import logging

from maskbench.config import params_hash

log = logging.getLogger(__name__)

FINETUNE_OPERATIONAL = ("threads", "device")


class StaleCheckpoint(ValueError):
    """A checkpoint made with settings that change the result: resuming it would mix two runs."""


def result_inputs(inputs: dict, operational: tuple[str, ...]) -> dict:
    """`inputs` without the operational settings: what the fingerprint hashes. `inputs`'
    settings are under "settings" (pretraining) or in each grid point under "points"."""
    def strip(settings: dict) -> dict:
        return {key: value for key, value in settings.items() if key not in operational}

    stripped = dict(inputs)
    if "settings" in inputs:
        stripped["settings"] = strip(inputs["settings"])
    if "points" in inputs:
        stripped["points"] = [strip(point) for point in inputs["points"]]
    return stripped


def fingerprint(inputs: dict, operational: tuple[str, ...]) -> str:
    return params_hash(result_inputs(inputs, operational))


def differences(saved, now, prefix: str = "") -> list[tuple[str, object, object]]:
    """(dotted key, saved value, current value) of every leaf that differs."""
    if isinstance(saved, dict) and isinstance(now, dict):
        return [diff for key in sorted(set(saved) | set(now), key=str)
                for diff in differences(saved.get(key, "<unset>"), now.get(key, "<unset>"), f"{prefix}{key}.")]
    if isinstance(saved, list) and isinstance(now, list) and len(saved) == len(now):
        return [diff for i, (a, b) in enumerate(zip(saved, now)) for diff in differences(a, b, f"{prefix}{i}.")]
    return [] if saved == now else [(prefix.rstrip("."), saved, now)]


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(changes: list[tuple[str, object, object]]) -> str:
    return "; ".join(f"{key}: {_short(old)} -> {_short(new)}" for key, old, new in changes)


def check_resumable(saved: dict, inputs: dict, operational: tuple[str, ...], where: str, way_out: str) -> list[str]:
    """The operational changes between the checkpoint `saved` (at `where`) and the job's
    current `inputs`, as lines for the log and metrics.json; StaleCheckpoint naming the
    result-changing ones (and `way_out`) when there are any. A checkpoint written before the
    settings were recorded (only its fingerprint of every setting) resumes when that matches."""
    if "inputs" not in saved:
        if saved.get("fingerprint") == params_hash(inputs):
            return []
        raise StaleCheckpoint(f"{where} was written by an earlier maskbench that did not record its settings, and "
                              f"they differ from the current ones; the checkpoint is kept. {way_out}")
    changed = differences(saved["inputs"], inputs)
    operational_keys = {key for key, _, _ in differences(saved["inputs"], result_inputs(saved["inputs"], operational))}
    operational_keys |= {key for key, _, _ in differences(inputs, result_inputs(inputs, operational))}
    results = [change for change in changed if change[0] not in operational_keys]
    if results:
        raise StaleCheckpoint(f"{where} was made with other settings that change the result: {describe(results)}. "
                              f"The checkpoint is kept. Restore the setting(s) to resume it, or {way_out}")
    return [f"{key}: {_short(old)} -> {_short(new)}" for key, old, new in changed]
