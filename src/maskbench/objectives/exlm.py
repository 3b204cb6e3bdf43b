"""ExLM (Zheng et al., ICML 2025, §4): every [MASK] is expanded into k states that the encoder
sees side by side, their dependencies are a DAG with learned transitions, and the masked tokens
are the emissions of a path through the DAG, marginalised by the states-alignment DP (App. H).

- Expansion (§4.2): each [MASK] becomes k copies; as in the official code the [CLS] (BOS) and
  [SEP] (EOS) are expanded too, so a block of n tokens with m masked becomes
  n - m + k·m + 2(k - 1) encoder inputs and the DAG has L = k·(m + 2) states, in order.
- 2-D RoPE (§4.2): state c of the [MASK] at position i sits at (i, c), ordinary tokens at (j, 0).
  `rope2d: false` (Table 2 "w/o 2D RoPE") keeps only the first coordinate, so the k clones of a
  [MASK] are indistinguishable to the encoder. The first coordinate is the RoPE of the run's
  shared `positions` setting (`maskbench.config.scheme_for`).
- Fine-tuning (`finetune_inputs`) lays a sequence out as pretraining lays out a block with no
  [MASK]: each [CLS] and [SEP] expanded into k states, pooled at the first [CLS] state.
- Transitions (§4.2): E = softmax(Q Kᵀ/√d + M) over the states, Q = H W_Q, K = H W_K, M keeping
  strictly forward edges (`dense`); `sparse` (Table 13) also removes edges between states of the
  same token; `none` (Table 2 "w/o Transitions") makes E uniform over the forward edges.
  `transition_input` says what W_Q and W_K read: `states`, H as the paper's equation;
  `states+position`, H beside a learned embedding of each state's slot in the expanded input,
  as the official code does by default (`--links-feature feature:position`); `detached+position`,
  the same with H's gradient stopped, so the transitions learn from the DAG loss and the encoder
  only from the emissions. Under RoPE, H carries no absolute position: transitions read from H
  alone can find the next token's states only by bending H toward position, and that pull keeps
  a small encoder at the unigram loss (README "A recipe that learns").
  `next_token_prior` (nats, default 0) is added to the logit of every edge into the next
  expanded token's states (state u of token j + 1 from any state of token j), so that before
  the transitions have learned anything most of a state's mass goes one token ahead, where
  every aligned path goes. Uniform at the start, the dense DAG's posterior puts a masked token
  only a few percent on its own [MASK]'s states and stays on the unigram plateau on text
  (docs/learning-failures.md).
- Emissions P_u = softmax of the tied LM head at state u.
- Loss (App. H): -log of the probability of emitting [BOS, masked tokens in order, EOS] along a
  path from the first state to the last, divided by the target length m + 2, as the official
  criterion does. `maskbench.align.dag_loss` sums over the paths between the first and last
  state, which emit nothing there; the official code has them emit BOS and EOS, so their
  log-probabilities of [CLS] and [SEP] are added here.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from maskbench.align import dag_loss
from maskbench.objectives.base import (FinetuneInputs, Objective, ObjectiveOutput, SpecialTokens, check_choice,
                                       check_int, check_ratio)
from maskbench.objectives.masking import expand_tokens, indices_of, mask_at, mask_count, random_mask

TRANSITIONS = ("dense", "sparse", "none")
TRANSITION_INPUTS = ("states", "states+position", "detached+position")


def alignment_log_likelihood(log_emit: torch.Tensor, log_trans: torch.Tensor) -> torch.Tensor:
    """log Z (B,) of the states-alignment DP over all forward paths from the first to the last
    state (`maskbench.align.dag_loss`, on the backend params.yaml's `align.backend` picks)."""
    return dag_loss(log_emit, log_trans)


def forward_edges(state_token: torch.Tensor, transitions: str) -> torch.Tensor:
    """(B, L, L) boolean edges v -> u of the DAG: v < u, and for `sparse` also different tokens.
    `state_token` (B, L) is the original position each state was expanded from."""
    L = state_token.shape[1]
    edges = torch.ones(L, L, dtype=torch.bool, device=state_token.device).triu(1)[None]
    if transitions == "sparse":
        edges = edges & (state_token[:, :, None] != state_token[:, None, :])
    return edges.expand(state_token.shape[0], L, L)


def next_token_edges(k: int, L: int, device=None) -> torch.Tensor:
    """(L, L) 1.0 where state u belongs to the expanded token after state v's (states laid out k
    per token, in order), else 0.0: the edges every path of the right length takes when it
    emits each masked token at its own [MASK]."""
    token = torch.arange(L, device=device) // k
    return (token[None, :] == token[:, None] + 1).float()


class ExLM(Objective):
    name = "exlm"
    valid_loss_measures = ("nats per masked token: the DAG's joint negative log-likelihood of the original tokens "
                           "at the fixed masked positions (summed over alignments, without the [CLS]/[SEP] "
                           "emissions), divided by their count")

    def __init__(self, encoder, specials: SpecialTokens, k: int = 2, mask_ratio: float = 0.15,
                 rope2d: bool = True, transitions: str = "dense", transition_input: str = "states",
                 next_token_prior: float = 0.0):
        super().__init__(encoder, specials)
        self.k = check_int("k", k, 1)
        self.mask_ratio = check_ratio("mask_ratio", mask_ratio)
        if not isinstance(rope2d, bool):
            raise ValueError(f"rope2d={rope2d!r}; expected true or false")
        self.rope2d = rope2d
        self.transitions = check_choice("transitions", transitions, TRANSITIONS)
        self.transition_input = check_choice("transition_input", transition_input, TRANSITION_INPUTS)
        if isinstance(next_token_prior, bool) or not isinstance(next_token_prior, (int, float)) or next_token_prior < 0:
            raise ValueError(f"next_token_prior={next_token_prior!r}; expected a number >= 0 (nats)")
        if next_token_prior and transitions == "none":
            raise ValueError("next_token_prior needs learned transitions; transitions='none' keeps them uniform")
        self.next_token_prior = float(next_token_prior)
        width = encoder.config.n_embd
        if transitions != "none":
            features = width
            if transition_input != "states":
                # an expanded block is at most k times its block: every token a [MASK] or an end
                self.transition_position = nn.Embedding(self.k * encoder.config.max_position, width)
                features += width
            self.transition_query = nn.Linear(features, width)
            self.transition_key = nn.Linear(features, width)

    def pretraining_info(self) -> dict:
        # expanded_ids: the [CLS] and [SEP] that fine-tuning expands as `expand` does a block's ends
        return {"objective": self.name, "k": self.k, "mask_ratio": self.mask_ratio, "rope2d": self.rope2d,
                "transitions": self.transitions, "transition_input": self.transition_input,
                "next_token_prior": self.next_token_prior, "expanded_ids": [self.specials.cls, self.specials.sep]}

    @classmethod
    def finetune_inputs(cls, info: dict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> FinetuneInputs:
        """The batch laid out as `expand` lays out a block with no [MASK]: every [CLS] and [SEP]
        (a pair's middle one too) becomes k states at the token's position with clone indices
        1..k, as the official code expands BOS and EOS in every forward pass; other tokens keep
        clone index 0. A row with fewer of them than the batch's most ends with extra slots
        (copies of its last token, attention mask 0) after its padding. The pooler reads the
        first [CLS] state; every input token reads its first state."""
        k = info["k"]
        B, T = input_ids.shape
        expanded_ids = torch.tensor(info["expanded_ids"], device=input_ids.device)
        expand = attention_mask.bool() & torch.isin(input_ids, expanded_ids)
        repeats = torch.where(expand, k, 1)
        first = repeats.cumsum(dim=1) - repeats                               # (B, T): each token's first state
        lengths = repeats.sum(dim=1)
        slot = torch.arange(int(lengths.max()), device=input_ids.device).expand(B, -1).contiguous()
        source = torch.searchsorted(first, slot, right=True) - 1              # the token each state copies
        beyond = slot >= lengths[:, None]
        clone = torch.where(expand.gather(1, source) & ~beyond, slot - first.gather(1, source) + 1, 0)
        kwargs = {"input_ids": input_ids.gather(1, source), "positions": source,
                  "attention_mask": attention_mask.gather(1, source).masked_fill(beyond, 0)}
        if info["rope2d"]:
            kwargs["clone_index"] = clone
        return FinetuneInputs(kwargs, torch.zeros(B, dtype=torch.long, device=input_ids.device), token_index=first)

    def expand(self, tokens: torch.Tensor, masked: torch.Tensor, n_masked: int):
        """Encoder inputs of the expanded block: ids, positions and clone indices (B, T')."""
        ends = torch.zeros_like(masked)
        ends[:, [0, -1]] = True
        source, clone = expand_tokens(masked | ends, self.k, n_masked + 2)
        inputs = tokens.masked_fill(masked, self.specials.mask).gather(1, source)
        return inputs, source, clone

    def log_transitions(self, states: torch.Tensor, state_token: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """log E (B, L, L), -inf off the DAG's edges (rows without successors are all -inf).
        `nodes` (B, L): each state's index in the expanded encoder input."""
        edges = forward_edges(state_token, self.transitions)
        if self.transitions == "none":
            scores = torch.zeros(edges.shape, device=states.device)
        else:
            prior = self.next_token_prior * next_token_edges(self.k, edges.shape[-1], states.device)
            scores = self.transition_scores(states, nodes) + prior
        # a finite fill keeps rows without successors free of NaN; they are set to -inf after
        log_e = scores.masked_fill(~edges, -1e9).log_softmax(dim=-1)
        return log_e.masked_fill(~edges, float("-inf"))

    def transition_scores(self, states: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """Q Kᵀ/√d (B, L, L) in float32 even under autocast: a softmax over up to L = k·(m + 2)
        states, whose logits bf16 would round to ~3 significant digits. Autocast recasts the
        inputs of every matmul it sees, so it is switched off here rather than undone by casts."""
        with torch.autocast(device_type=states.device.type, enabled=False):
            width = states.shape[-1]
            features = states.float()
            if self.transition_input == "detached+position":
                features = features.detach()
            if self.transition_input != "states":
                features = torch.cat([features, self.transition_position(nodes).float()], dim=-1)
            query, key = self.transition_query(features), self.transition_key(features)
            return query @ key.transpose(1, 2) / math.sqrt(width)

    @staticmethod
    def emission_log_probs(state_logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log P_u(y_i) (B, m, L), log normaliser (B, L)) of every state u emitting every masked
        token y_i (`targets` (B, m), in order): logit - logsumexp, gathered without a (B, L, V)
        log-softmax tensor."""
        B, L, _ = state_logits.shape
        m = targets.shape[1]
        log_norm = state_logits.float().logsumexp(dim=-1)
        log_emit = state_logits.gather(2, targets[:, None, :].expand(B, L, m)).float() - log_norm[..., None]
        return log_emit.transpose(1, 2).contiguous(), log_norm

    def draw(self, tokens: torch.Tensor, generator: torch.Generator | None) -> dict:
        B, T = tokens.shape
        masked = random_mask(B, T, self.mask_ratio, generator, device=tokens.device)
        return {"masked_at": indices_of(masked, mask_count(T - 2, self.mask_ratio))}

    def step(self, tokens: torch.Tensor, draws: dict, output_hidden_states: bool = False) -> ObjectiveOutput:
        B, T = tokens.shape
        masked_at = draws["masked_at"]
        m = masked_at.shape[1]  # the draws' shape, not mask_ratio: masked_nll passes its own
        inputs, source, clone = self.expand(tokens, mask_at(masked_at, T), m)
        out = self.encoder(inputs, positions=source, clone_index=clone if self.rope2d else None,
                           output_hidden_states=output_hidden_states)

        L = self.k * (m + 2)
        nodes = indices_of(clone > 0, L)                                      # DAG states, in order
        states = out.last_hidden_state.gather(1, nodes[..., None].expand(-1, -1, out.last_hidden_state.shape[-1]))
        state_token = source.gather(1, nodes)
        state_logits = self.encoder.lm_logits(states)                         # (B, L, V)
        log_emit, log_norm = self.emission_log_probs(state_logits, tokens.gather(1, masked_at))
        log_trans = self.log_transitions(states, state_token, nodes)

        log_z = alignment_log_likelihood(log_emit, log_trans)
        log_ends = (state_logits[:, 0, self.specials.cls].float() - log_norm[:, 0]
                    + state_logits[:, -1, self.specials.sep].float() - log_norm[:, -1])
        loss = -((log_z + log_ends) / (m + 2)).mean()

        # analyses: the distributions of the states of masked tokens, labelled with that token;
        # those are all states but the k of [CLS] first and the k of [SEP] last
        of_mask = slice(self.k, L - self.k)
        return ObjectiveOutput(loss=loss, num_predictions=B * m, logits=state_logits[:, of_mask].flatten(0, 1),
                               labels=tokens.gather(1, state_token)[:, of_mask].flatten(),
                               hidden_states=out.hidden_states,
                               input_is_mask=inputs == self.specials.mask, log_transitions=log_trans,
                               state_logits=state_logits, log_z=log_z, log_emissions=log_emit)

    def masked_nll(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """-log Z: the masked tokens' joint likelihood under the DAG, all alignments summed,
        without the [CLS]/[SEP] emission terms the loss adds (they are not masked tokens)."""
        out = self.step(tokens, {"masked_at": masked_at})
        return -out.log_z.sum(), masked_at.numel()

    @staticmethod
    def top_tokens(state_logits: torch.Tensor, n: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
        """The n most probable tokens of every state and their probabilities (Fig. 10)."""
        probs, ids = state_logits.float().softmax(dim=-1).topk(n, dim=-1)
        return ids, probs
