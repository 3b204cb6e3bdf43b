"""What every objective shares: the special token ids it needs, the shape of its output, and the
hooks through which pretraining and fine-tuning learn what the objective needs from the encoder."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from maskbench.objectives.cards import ObjectiveCard, card


@dataclass(frozen=True)
class SpecialTokens:
    pad: int
    cls: int
    sep: int
    mask: int
    # only ExLM's per-[MASK] CTC reads it: its blank, as the official criterion's is the dictionary's unk
    unk: int | None = None

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "SpecialTokens":
        return cls(
            pad=tokenizer.pad_token_id,
            cls=tokenizer.cls_token_id,
            sep=tokenizer.sep_token_id,
            mask=tokenizer.mask_token_id,
            unk=tokenizer.unk_token_id,
        )


@dataclass
class ObjectiveOutput:
    """What pretraining reads of a step: the loss, and how many predictions it averages over."""

    loss: torch.Tensor
    num_predictions: int


@dataclass
class Inspection:
    """What the analyses read of a step (`Objective.inspect`) and training never needs: what its
    loss was computed from. ExLM's adds its DAG (`maskbench.objectives.exlm.ExLMInspection`)."""

    # logits and gold ids at the predicted positions (N, V) and (N,): the predictive
    # distribution whose entropy the papers report
    logits: torch.Tensor
    labels: torch.Tensor
    # per-layer encoder states (embeddings first) of the input the objective built, only when
    # asked for (they are every layer's activations), and which of those inputs are [MASK]
    # (B, T'; None for AR and DAR, whose states are all of real tokens), so analyses can take the
    # effective rank of real-token representations (MAE-LM Fig. 1)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    input_is_mask: torch.Tensor | None = None
    # (B, T') the input states that are not the block's body (its first [CLS]'s and last [SEP]'s
    # states, padding), where they are not simply the first and last ones (ExLM); None otherwise
    input_is_frame: torch.Tensor | None = None


@dataclass
class FinetuneInputs:
    """How to present a right-padded fine-tuning batch (B, T) to an encoder: keyword arguments
    for `Encoder.forward`, whose input may hold more states than the batch has tokens (Repeated
    MLM's copies, ExLM's expanded [CLS] and [SEP]); `token_index` (B, T), the state each input
    token reads, so `gather_rows(states, token_index)` lines up with the input ids (token-level
    heads, QA), None for the identity; and `pool_position` (B,), the input token whose state
    the pooler reads."""

    encoder_kwargs: dict = field(default_factory=dict)
    pool_position: torch.Tensor | None = None
    token_index: torch.Tensor | None = None


def draws_of_rows(draws: dict, rows: slice, device=None) -> dict:
    """The draws of the sequences `rows` (on `device` if given). A tensor draw is indexed by
    sequence first; any other is a fact of the whole batch (ExLM's `padded`), kept as it is."""
    def rows_of(draw):
        if not isinstance(draw, torch.Tensor):
            return draw
        return draw[rows] if device is None else draw[rows].to(device)
    return {name: rows_of(draw) for name, draw in draws.items()}


class Objective(nn.Module, abc.ABC):
    """An encoder plus whatever the objective adds (heads, decoders), trained end to end.

    A step is two calls, so that what is random and what is computed stay apart:

        draws = objective.draw(tokens, generator)   # every random choice of the step
        out = objective(tokens, draws)              # the loss: an ObjectiveOutput

    `tokens` are (B, T) blocks that start with [CLS] and end with [SEP]. `draw` returns a dict
    of tensors (which positions are masked, group sizes) drawn from `generator`; `forward` is
    deterministic given them, with shapes that the draws' shapes and the objective's knobs
    fix, so `torch.compile` captures it whole (`fullgraph=True`: no host syncs, no
    data-dependent shapes). `draw` stays outside any compiled graph: torch.compile cannot
    trace a user's torch.Generator. Pretraining draws once for its global batch and trains it
    in slices (`take`); analyses pass the draws they fix themselves, and call

        seen = objective.inspect(tokens, draws)     # what the loss was computed from: an Inspection

    for the predictions, labels and encoder states of the same step. `pretraining_info() ->
    dict` gives the name and knobs saved into the encoder config for fine-tuning to read
    back. `encoder` is what fine-tuning keeps.

    Hooks let an objective ask for what it needs without the loops knowing it:
    `encoder_settings` (longest position; the position scheme is the run's, see
    `maskbench.model.schemes`) when pretraining builds the encoder, `start_output_bias` when it
    starts the LM head, and `finetune_inputs` when fine-tuning feeds the encoder.
    """

    name: str = ""
    valid_loss_measures: str = ""  # what `masked_nll` measures, in a few words (metrics.json)

    def __init__(self, encoder: nn.Module, specials: SpecialTokens):
        super().__init__()
        self.encoder = encoder
        self.specials = specials

    @property
    def card(self) -> ObjectiveCard:
        """What the workflow knows of this objective (`maskbench.objectives.cards`)."""
        return card(self.name)

    @property
    def trains(self) -> bool:
        """False for the `none` control: pretraining runs no step."""
        return self.card.pretrains

    @property
    def causal(self) -> bool:
        """Trains the encoder under a causal mask (AR, DAR): saved as its config's `causal`."""
        return self.card.causal

    def draw(self, tokens: torch.Tensor, generator: torch.Generator | None) -> dict:
        """The step's random choices as tensors (none by default)."""
        return {}

    def take(self, draws: dict, rows: slice) -> dict:
        """The draws of the sequences `rows` of the batch they were drawn for: pretraining draws
        a step's choices once for its whole global batch and trains it in micro-batches
        (`maskbench.train.pretrain`). Every draw is indexed by sequence first by default."""
        return draws_of_rows(draws, rows)

    def forward(self, tokens: torch.Tensor, draws: dict) -> ObjectiveOutput:
        """The loss of one batch given its random choices (`draw`'s): what pretraining trains.
        The inspection `_step` also returns is dropped (a compiled graph leaves out what it does
        not return)."""
        out, _ = self._step(tokens, draws)
        return out

    def inspect(self, tokens: torch.Tensor, draws: dict, hidden_states: bool = False) -> Inspection:
        """What the analyses read of the step `forward` takes on the same batch and draws: its
        predictions and their labels, and with `hidden_states` every layer's encoder states."""
        _, seen = self._step(tokens, draws, hidden_states)
        return seen

    @abc.abstractmethod
    def _step(self, tokens: torch.Tensor, draws: dict,
              hidden_states: bool = False) -> tuple[ObjectiveOutput, Inspection]:
        """One step, what every objective defines: its loss and what the loss was computed from,
        in one computation, so that what the analyses inspect is what training optimises."""

    @abc.abstractmethod
    def masked_nll(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(summed negative log-likelihood in nats, number of terms) of the original tokens at
        the positions `masked_at` (B, n), increasing per row, with those tokens hidden: the
        validation loss pretraining reports (`maskbench.train.validation`). Every masked
        objective scores the same positions this way, so their values compare; AR and DAR
        report their own next-token loss instead (see their `valid_loss_measures`)."""

    def masked_nll_floor(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(summed nats, number of terms) of `masked_nll` on the same input that no prediction can
        lower. None here: each masked token is scored by its own prediction alone. ExLM's DAG adds
        what its transitions cost, which a unigram predictor pays on top of the unigram loss."""
        return torch.zeros((), device=tokens.device), masked_at.numel()

    def start_output_bias(self, bias: torch.Tensor) -> None:
        """Adjust, in place, the LM head's starting output bias (`pretrain.output_bias_init`, set
        from the corpus's token frequencies) for an output the objective predicts that the corpus
        does not hold. Nothing by default: every objective predicts the corpus's tokens."""

    @classmethod
    def encoder_settings(cls, seq_len: int, knobs: dict, scheme: str) -> dict:
        """`EncoderConfig` fields this objective needs for blocks of `seq_len` tokens, its
        encoder using the position scheme `scheme`."""
        return {"max_position": seq_len, "position_scheme": scheme}

    @classmethod
    def finetune_inputs(cls, info: dict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> FinetuneInputs:
        """Default: the batch as it is, pooled at the first ([CLS]) state."""
        return FinetuneInputs({"input_ids": input_ids, "attention_mask": attention_mask},
                              torch.zeros(input_ids.shape[0], dtype=torch.long, device=input_ids.device))

    @classmethod
    def finetune_max_length(cls, info: dict, max_position: int) -> int:
        """The longest fine-tuning input (in original tokens) the encoder can take."""
        return max_position


def check_ratio(name: str, value: float) -> float:
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name}={value}; expected 0 < {name} < 1")
    return float(value)


def check_choice(name: str, value, choices) -> object:
    if value not in choices:
        raise ValueError(f"{name}={value!r}; expected one of {list(choices)}")
    return value


def check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}={value!r}; expected an integer >= {minimum}")
    return value
