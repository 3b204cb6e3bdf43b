"""One card per pretraining objective: what every layer outside the training step needs to know
of it, stated once and read without torch.

A run's `objective` in params.yaml names a card. Params validation reads its knobs and their
defaults and the checks across knobs the schema cannot make; `maskbench.resources` its cost
(`passes`, FLOPs and bytes of one training sequence) and throughput row; the stage table, plan
and reports whether it pretrains at all (the `none` control does not) and what the analyses may
ask of it; `maskbench.objectives` builds the class the card names (`implementation`). Adding an
objective is its card here, its module, and its docs (docs/pretraining.md "Adding an
objective"): every layer finds it through `CARDS`.

    card("repeated_mlm").knobs({"k": 4})   # {"k": 4, "mask_ratio": 0.15}: defaults filled in
    card("none").pretrains                 # False: the untrained control
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from maskbench.objectives.cost import LOGIT_BYTES, Passes, activation_bytes, block_params, mask_count, stack_flops

# ExLM's learned transitions (knob `transitions`; `none` and `ctc` learn none)
LEARNED_TRANSITIONS = ("dense", "sparse")


def _no_problems(knobs: dict) -> list[str]:
    return []


def _same_positions(knobs: dict, tokens: int) -> int:
    return tokens


@dataclass(frozen=True)
class ObjectiveCard:
    """An objective as the workflow sees it. `defaults` lists every knob; `problems(knobs)` the
    checks across knobs that the schema's per-knob types cannot make (resolved knobs in, one
    line per problem out); `passes(size, T, knobs)` what one training sequence of T tokens runs
    (`maskbench.objectives.cost.Passes`); `finetune_positions(knobs, tokens)` the encoder
    positions of a fine-tuning row of `tokens` tokens."""

    name: str
    implementation: str  # its class, "module:Class"
    summary: str  # what it is, in a few words (docs, report labels)
    defaults: dict
    passes: Callable[[dict, int, dict], Passes]
    pretrains: bool = True  # False for the untrained control: pretraining runs no step
    causal: bool = False  # trains under a causal mask: reads a block once per generation, pools the last token
    rate: str = ""  # its row of throughput.<device>.pretrain ("" = its name)
    problems: Callable[[dict], list[str]] = _no_problems
    finetune_positions: Callable[[dict, int], int] = _same_positions
    # generation perplexity (Look Around Tab. 7): "causal" (each token from its prefix),
    # "masked" (read as "prefix [MASK]"), or "" where it does not apply
    generation: str = ""
    alignment_kernel: bool = False  # its steps run the states alignment (CuPy's kernel on CUDA)

    @property
    def throughput_key(self) -> str:
        return self.rate or self.name

    def knobs(self, given: dict | None) -> dict:
        """A run's knobs with the defaults of those it leaves out."""
        return {**self.defaults, **(given or {})}

    def knob_problems(self, given: dict | None) -> list[str]:
        """What is wrong with a run's knobs: names the card does not know, then the card's checks
        across knobs; [] when they are sound."""
        unknown = sorted(set(given or {}) - set(self.defaults))
        if unknown:
            return [f"{unknown} not knobs of {self.name}; expected some of {sorted(self.defaults)}"]
        return self.problems(self.knobs(given))


# --- cost of one training sequence of T tokens (knobs resolved) -------------------------------

def _masked(size: dict, T: int, knobs: dict) -> Passes:
    """MLM (and the `none` control's validation): T positions, the masked ones predicted."""
    return Passes(((T, size["n_layer"]),), mask_count(T - 2, knobs["mask_ratio"]))


def _varlen_mlm(size: dict, T: int, knobs: dict) -> Passes:
    """MLM at the mean of the ratios drawn per batch."""
    return _masked(size, T, {"mask_ratio": (knobs["mask_ratio_min"] + knobs["mask_ratio_max"]) / 2})


def _repeated_mlm(size: dict, T: int, knobs: dict) -> Passes:
    """k·T positions (every token repeated), p of the copies masked and predicted."""
    k = knobs["k"]
    return Passes(((k * T, size["n_layer"]),), mask_count(k * T - 2 * k, knobs["mask_ratio"]))


def _mae_lm(size: dict, T: int, knobs: dict) -> Passes:
    """The encoder over the visible tokens (and the δ share of [MASK] kept), a decoder of
    `decoder_layers` blocks over all T, the masked tokens predicted. A decoder of another width
    (`decoder_width`) and its two projections are counted apart, their activations at float32's
    size (an upper bound under bf16). A cross-attention to the encoder's outputs counts its four
    projections and its scores over the visible positions on top of each block (an upper bound
    for `cross`, which has no self-attention)."""
    m = mask_count(T - 2, knobs["mask_ratio"])
    layers, width = knobs["decoder_layers"], knobs["decoder_width"] or size["n_embd"]
    visible = T - m + round(knobs["delta"] * m)
    cross_params = 0 if knobs["decoder_attention"] == "self" else layers * 4 * width * width
    cross_flops = 0 if not cross_params else 6 * cross_params * T + layers * 12 * width * T * visible
    if width == size["n_embd"]:
        return Passes(((visible, size["n_layer"]), (T, layers)), m, other_flops=cross_flops,
                      other_params=layers * block_params(size) + cross_params)
    decoder = {**size, "n_embd": width, "n_inner": size["n_inner"] * width // size["n_embd"]}
    projections = 2 * size["n_embd"] * width
    return Passes(((visible, size["n_layer"]),), m,
                  other_flops=stack_flops(decoder, T, layers) + 6 * projections * T + cross_flops,
                  other_params=layers * block_params(decoder) + projections + cross_params,
                  other_bytes=T * layers * activation_bytes(decoder, half=False))


def _exlm(size: dict, T: int, knobs: dict) -> Passes:
    """Each of the m masked tokens and the [CLS] and [SEP] expanded into k states: T + (k-1)(m+2)
    positions, the L = k(m+2) states predicted; the transitions' Q, K projections and QKᵀ over
    the states (with `transition_heads` H > 1, H float32 L x L score matrices and the gate); the
    alignment DP over (m targets, L states) (`Passes.alignment`: FLOPs on a CPU, its recorded
    time on a GPU); its float64 tables and the float32 L x L transition scores. `transitions:
    ctc` has no DP: each token's k states alone."""
    k, d = knobs["k"], size["n_embd"]
    m = mask_count(T - 2, knobs["mask_ratio"])
    states = k * (m + 2)
    transitions = knobs["transitions"]
    if transitions == "ctc":
        return Passes(((T + (k - 1) * (m + 2), size["n_layer"]),), states)
    heads = knobs["transition_heads"]
    heads = size["n_head"] if heads == "encoder" else heads
    flops, params = 0, 0
    if transitions != "none":
        with_position = knobs["transition_input"] != "states"
        features = 2 * d if with_position else d
        flops += 6 * 2 * features * d * states + 6 * d * states ** 2
        params = 2 * features * d + (k * T * d if with_position else 0) + (features * heads if heads > 1 else 0)
    return Passes(((T + (k - 1) * (m + 2), size["n_layer"]),), states, flops, params,
                  other_bytes=LOGIT_BYTES * heads * states ** 2 + 16 * m * states, alignment=(m, states))


def _ar(size: dict, T: int, knobs: dict) -> Passes:
    """T positions under a causal mask (computed in full), every next token predicted."""
    return Passes(((T, size["n_layer"]),), T - 1)


def _dar(size: dict, T: int, knobs: dict) -> Passes:
    """Two streams of T as one sequence of 2T; every position after the first group (of mean
    size (t+1)/2) predicted."""
    return Passes(((2 * T, size["n_layer"]),), T - (knobs["t"] + 1) / 2)


# --- checks across knobs -------------------------------------------------------------------

def _varlen_problems(knobs: dict) -> list[str]:
    low, high = knobs["mask_ratio_min"], knobs["mask_ratio_max"]
    return [f"mask_ratio_min={low} exceeds mask_ratio_max={high}"] if low > high else []


def _exlm_problems(knobs: dict) -> list[str]:
    if knobs["next_token_prior"] and knobs["transitions"] not in LEARNED_TRANSITIONS:
        return [f"next_token_prior needs learned transitions; transitions={knobs['transitions']!r} has none"]
    return []


# --- the cards -------------------------------------------------------------------------------

MASK_RATIO = 0.15  # the papers' MLM ratio (MAE-LM, ExLM, Look Around): every masked objective's default

CARDS: dict[str, ObjectiveCard] = {card.name: card for card in (
    ObjectiveCard("mlm", "maskbench.objectives.mlm:MaskedLM", "masked language modelling",
                  {"mask_ratio": MASK_RATIO}, _masked,
                  generation="masked"),
    ObjectiveCard("varlen_mlm", "maskbench.objectives.varlen_mlm:VariableLengthMLM",
                  "MLM at a mask ratio drawn per batch",
                  {"mask_ratio_min": MASK_RATIO, "mask_ratio_max": 0.3}, _varlen_mlm, problems=_varlen_problems,
                  generation="masked"),
    ObjectiveCard("repeated_mlm", "maskbench.objectives.repeated_mlm:RepeatedMLM",
                  "MLM over every token repeated k times",
                  {"k": 2, "mask_ratio": MASK_RATIO}, _repeated_mlm,
                  finetune_positions=lambda knobs, tokens: knobs["k"] * tokens),
    ObjectiveCard("mae_lm", "maskbench.objectives.mae_lm:MaskedAutoencoderLM", "MAE-LM: [MASK] left out of the encoder",
                  {"mask_ratio": MASK_RATIO, "decoder_layers": 4, "delta": 0.0, "aligned_positions": True,
                   "decoder_input_norm": False, "decoder_resets_mask": False, "masked_input": "mask",
                   "decoder_width": None, "decoder_attention": "self"}, _mae_lm),
    # a pair's [CLS] and both [SEP] expanded into k states each
    ObjectiveCard("exlm", "maskbench.objectives.exlm:ExLM",
                  "ExLM: each [MASK] expanded into k states, aligned by a DAG",
                  {"k": 2, "mask_ratio": MASK_RATIO, "rope2d": True, "transitions": "dense",
                   "transition_input": "states", "transition_heads": 1, "next_token_prior": 0.0}, _exlm,
                  problems=_exlm_problems, finetune_positions=lambda knobs, tokens: tokens + 3 * (knobs["k"] - 1),
                  alignment_kernel=True),
    ObjectiveCard("ar", "maskbench.objectives.ar:CausalLM", "autoregressive: next-token prediction", {},
                  _ar, causal=True,
                  generation="causal"),
    ObjectiveCard("dar", "maskbench.objectives.dar:GroupAutoregressiveLM",
                  "autoregressive over groups of up to t tokens", {"t": 2},
                  _dar, causal=True),
    # its validation loss is MLM's, at its mask_ratio, on the untrained encoder
    ObjectiveCard("none", "maskbench.objectives.none:NoPretraining", "control: no pretraining",
                  {"mask_ratio": MASK_RATIO}, _masked,
                  pretrains=False, rate="mlm"),
)}


def card(objective: str) -> ObjectiveCard:
    """The card of `objective`; ValueError naming the known ones."""
    if objective not in CARDS:
        raise ValueError(f"unknown objective {objective!r}; expected one of {sorted(CARDS)}")
    return CARDS[objective]


def run_card(run: dict) -> ObjectiveCard:
    """The card of a `runs.<name>` entry of params.yaml."""
    return card(run["objective"])


def run_knobs(run: dict) -> dict:
    """A `runs.<name>` entry's knobs, its objective's defaults filled in."""
    return run_card(run).knobs(run.get("knobs"))
