"""Which position scheme a run's encoder gets: the shared `positions` setting, and what an
objective adds to it.

Every run's encoder gets the pretraining setting `positions` (`pretrain.positions`, unless the
run's `overrides` change it), so the arms of a table differ in their objective, not in how the
encoder knows where a token is. The one objective that adds to it is ExLM: its 2-D RoPE (knob
`rope2d`, default true; ExLM §4.2) is the setting's RoPE plus the clone index.

This module imports nothing, so params validation (which every stage runs) and the reports
read the rule without loading torch; `maskbench.model.positions` builds the schemes it names.
"""

from __future__ import annotations


def scheme_for(objective: str, knobs: dict, positions: str) -> str:
    """The position scheme of an encoder pretrained by `objective` with `knobs` under the
    setting `positions`: the setting itself, except that ExLM's 2-D RoPE turns `rope` into
    `rope2d` (`rope2d: false`, 1-D RoPE, is ExLM Tab. 2 "w/o 2D RoPE"). 2-D RoPE under a
    setting without RoPE is a ValueError, which params validation reports naming the run."""
    if objective != "exlm" or not knobs.get("rope2d", True):
        return positions
    parts = positions.split("+")
    if "rope" not in parts:
        raise ValueError(f"knobs.rope2d: true (ExLM's 2-D RoPE) needs rope in positions, not {positions!r}")
    return "+".join("rope2d" if part == "rope" else part for part in parts)
