"""What distinguishes a run beyond its objective, in words, for a table's row: every knob the
run declares in params.yaml (so a variant never hides behind its objective's name: "exlm" at
k = 2 with a sparse DAG and detached transitions reads so; a knob left out is at its objective's
default, which the schema's description of the knobs gives), and where the run's blocks put
their LayerNorms when a profile sets it (`pretrain.block_norm`; the paper profile trains ExLM's
experiments pre-LN and the others post-LN). Read from params.yaml only, not from the objectives'
code, so the report stage does not depend on the model's code.
"""

from __future__ import annotations

from maskbench.config import pretrains, run_settings
from maskbench.report.figures import percent


# each knob's value in words; a knob not listed here is shown as `name = value`
WORDS = {
    "k": lambda v: f"k = {v}",
    "t": lambda v: f"t = {v}",
    "mask_ratio": lambda v: f"p = {percent(v)}",
    "rope2d": lambda v: "2-D RoPE" if v else "no 2-D RoPE",
    "transitions": {"dense": "dense DAG", "sparse": "sparse DAG",
                    "none": "uniform transitions", "ctc": "per-mask CTC (no DAG)"}.get,
    "transition_input": {"states": "transitions from the states",
                         "states+position": "transitions from the states + slot embedding",
                         "detached+position": "transitions from detached states + slot embedding"}.get,
    "transition_heads": lambda v: ("transition heads: one per encoder head" if v == "encoder"
                                   else f"{v} transition head" + ("s" if v != 1 else "")),
    "next_token_prior": lambda v: f"next-token prior {v:g} nats",
    "decoder_layers": lambda v: f"{v}-layer decoder",
    "delta": lambda v: f"δ = {v:g}",
    "aligned_positions": lambda v: "aligned positions" if v else "misaligned positions",
    "decoder_input_norm": lambda v: "decoder input LayerNorm" if v else "no decoder input LayerNorm",
    "decoder_resets_mask": lambda v: "decoder resets [MASK]" if v else "decoder reads the encoder at [MASK]",
    "masked_input": {"mask": "encoder reads [MASK]", "random": "encoder reads random real tokens"}.get,
    "decoder_width": lambda v: f"{v}-wide decoder",
    "decoder_attention": {"self": "decoder self-attention", "self+cross": "decoder self- + cross-attention",
                          "cross": "decoder cross-attention only"}.get,
}


def knob_words(name: str, value) -> str:
    words = WORDS.get(name)
    said = words(value) if words else None
    return said if said is not None else f"{name} = {value}"


def knobs_text(config: dict, run: str, leave_out: tuple[str, ...] = ()) -> str:
    """The run's knobs in words, `; `-separated (`leave_out`: knobs the table's layout already
    shows, e.g. k and p in a (k, p) grid); "—" for the `none` control."""
    spec = config["runs"][run]
    if not pretrains(config, run):
        return "—"
    knobs = dict(spec.get("knobs", {}))
    parts = []
    if "mask_ratio_min" in knobs and "mask_ratio_max" not in leave_out:
        parts.append(f"p uniform in [{percent(knobs.pop('mask_ratio_min'))}, {percent(knobs.pop('mask_ratio_max'))}]")
    parts += [knob_words(name, value) for name, value in knobs.items() if name not in leave_out]
    block_norm = run_settings(config, run).get("block_norm")
    if block_norm is not None:
        parts.append(f"{block_norm}-LN")
    return "; ".join(parts) or "—"
