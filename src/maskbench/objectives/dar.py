"""Diversity-enhanced autoregressive SSL (Look Around §5.1, Eq. 6 and App. B.3): the block is cut
into consecutive groups — the first of size uniform in {1..t}, the rest of size t (the last may
be shorter) — and every group is predicted in parallel from the groups before it.

One prediction target per position but several per context cannot be read off a single stream,
so, as in XLNet, two streams share every weight: the content stream h sees token contents, the
query stream g sees only positions (it starts from the [MASK] embedding plus the position) and
reads the content stream. With f(i) the group of position i, Eq. (24):

    content stream: i attends to j  iff  f(i) >= f(j)
    query stream:   i attends to j  iff  f(i) >  f(j)      (never its own token or group)

Both streams run as one sequence of length 2T through the unchanged encoder: the attention mask
makes content rows read content keys under M_h and query rows read content keys under M_g.
Query rows of the first group predict nothing and have no key under M_g; they attend only to
their own query slot (a position, no content), so that no attention row is empty.
With t = 1 every group is one token and this is the `ar` objective's factorisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from maskbench.objectives.ar import CausalLM
from maskbench.objectives.base import Inspection, ObjectiveOutput, SpecialTokens, check_int
from maskbench.objectives.cards import card


def group_index(first_size: torch.Tensor, length: int, t: int) -> torch.Tensor:
    """f (B, T), numbered from 1: positions < first_size form group 1, then groups of t."""
    position = torch.arange(length, device=first_size.device)[None]
    first = first_size[:, None]
    later = 2 + torch.div(position - first, t, rounding_mode="floor")
    return torch.where(position < first, 1, later)


def two_stream_masks(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The content- and query-stream masks of Eq. (24), (B, T, T) boolean, True = may attend."""
    f_query, f_key = groups[:, :, None], groups[:, None, :]
    return f_query >= f_key, f_query > f_key


def two_stream_attention(groups: torch.Tensor) -> torch.Tensor:
    """(B, 1, 2T, 2T) mask over [content stream; query stream] (see the module docstring)."""
    content, query = two_stream_masks(groups)
    B, T, _ = content.shape
    own_slot = torch.eye(T, dtype=torch.bool, device=groups.device) & ~query.any(dim=2, keepdim=True)
    no_keys = torch.zeros_like(content)
    top = torch.cat([content, no_keys], dim=2)
    bottom = torch.cat([query, own_slot], dim=2)
    return torch.cat([top, bottom], dim=1)[:, None]


class GroupAutoregressiveLM(CausalLM):
    """Fine-tuning is inherited from `CausalLM`: groups of one token, i.e. a causal mask, and
    the last real token pooled."""

    name = "dar"
    valid_loss_measures = ("nats per predicted token: DAR's own loss (every group from the groups before it, fixed "
                           "group sizes) on the validation blocks; not comparable with the masked objectives' "
                           "values, only through the unigram gap")

    def __init__(self, encoder, specials: SpecialTokens, t: int = card("dar").defaults["t"]):
        super().__init__(encoder, specials)
        self.t = check_int("t", t, 1)

    def pretraining_info(self) -> dict:
        return {"objective": self.name, "t": self.t}

    def draw(self, tokens: torch.Tensor, generator: torch.Generator | None) -> dict:
        """The first group's size per sequence, and where the predicted positions (those after
        the first group) lie in the flattened (B·T) batch: their number, B·T − Σ first_size,
        varies from batch to batch, so it is read here (a device sync on a GPU), outside the
        compiled graph, whose shapes then follow from the draws' shapes."""
        B, T = tokens.shape
        first_size = torch.randint(1, self.t + 1, (B,), generator=generator, device=tokens.device)
        return self._placed(first_size, group_index(first_size, T, self.t) > 1)

    def take(self, draws: dict, rows: slice) -> dict:
        """A micro-batch's draws: its flat predicted positions count from its own first row."""
        return self._placed(draws["first_size"][rows], draws["predicted"][rows])

    @staticmethod
    def _placed(first_size: torch.Tensor, predicted: torch.Tensor) -> dict:
        return {"first_size": first_size, "predicted": predicted,
                "predicted_at": predicted.flatten().nonzero().squeeze(1)}

    def _step(self, tokens: torch.Tensor, draws: dict,
              hidden_states: bool = False) -> tuple[ObjectiveOutput, Inspection]:
        B, T = tokens.shape
        groups = group_index(draws["first_size"], T, self.t)
        streams = torch.cat([tokens, torch.full_like(tokens, self.specials.mask)], dim=1)
        positions = torch.arange(T, device=tokens.device).repeat(2).expand(B, 2 * T)
        out = self.encoder(streams, positions=positions, attn_mask=two_stream_attention(groups),
                           output_hidden_states=hidden_states)
        predicted_at = draws["predicted_at"]                               # flat indices, in order
        logits = self.encoder.lm_logits(out.last_hidden_state[:, T:].flatten(0, 1).index_select(0, predicted_at))
        labels = tokens.flatten().index_select(0, predicted_at)
        loss = F.cross_entropy(logits.float(), labels)
        content = tuple(h[:, :T] for h in out.hidden_states) if hidden_states else None  # the tokens' stream
        return (ObjectiveOutput(loss=loss, num_predictions=labels.numel()),
                Inspection(logits=logits, labels=labels, hidden_states=content))
