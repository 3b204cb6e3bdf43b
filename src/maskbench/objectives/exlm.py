"""ExLM (Zheng et al., ICML 2025, §4): every [MASK] is expanded into k states that the encoder
sees side by side, their dependencies are a DAG with learned transitions, and the masked tokens
are the emissions of a path through the DAG, marginalised by the states-alignment DP (App. H).

- Expansion (§4.2): each [MASK] becomes k copies; as in the official code every [CLS] (BOS) and
  [SEP] (EOS) is expanded too (the block's ends and the [SEP]s between its documents), so a
  block of n tokens with m masked and s [CLS]/[SEP] becomes n + (k - 1)(m + s) encoder inputs
  and the DAG has L = k·(m + s) states, in order. Pretraining and fine-tuning lay blocks out
  with one function (`masking.expand_tokens`); a row with fewer [CLS]/[SEP] than the batch's
  most ends with padding slots that no state attends to and the DAG does not hold.
- 2-D RoPE (§4.2): state c of the [MASK] at position i sits at (i, c), ordinary tokens at (j, 0).
  `rope2d: false` (Table 2 "w/o 2D RoPE") keeps only the first coordinate, so the k clones of a
  [MASK] are indistinguishable to the encoder. The first coordinate is the RoPE of the run's
  shared `positions` setting (`maskbench.model.schemes`).
- Fine-tuning (`finetune_inputs`) lays a sequence out as pretraining lays out a block with no
  [MASK]: each [CLS] and [SEP] expanded into k states, pooled at the first [CLS] state.
- Transitions (§4.2): E = softmax(Q Kᵀ/√d + M) over the states, Q = H W_Q, K = H W_K, M keeping
  strictly forward edges (`dense`); `sparse` (Table 13) also removes edges between states of the
  same token; `none` (Table 2 "w/o Transitions", this project's reading) makes E uniform over
  the forward edges; `ctc` (the official reading, below) drops the DAG.
  `transition_input` says what W_Q and W_K read: `states`, H as the paper's equation;
  `states+position`, H beside a learned embedding of each state's slot in the expanded input,
  as the official code does by default (`--links-feature feature:position`); `detached+position`,
  the same with H's gradient stopped, so the transitions learn from the DAG loss and the encoder
  only from the emissions. Under RoPE, H carries no absolute position: transitions read from H
  alone can find the next token's states only by bending H toward position, and that pull keeps
  a small encoder at the unigram loss (docs/notes/2026-11-24-a-recipe-that-learns.md).
  `transition_heads` H > 1 is the official code's multi-head form: Q and K split into H chunks
  of width d/H, each head its own softmax over the forward edges (scaled by √(d/H)), mixed by a
  gate, a softmax over the heads of a linear map of the source state's features (what W_Q and
  W_K read): log E = logsumexp_h(log E_h + log g_h(v)) for the edges v -> u. `encoder` sets H
  to the encoder's attention heads, as the official code does; 1 is the paper's equation.
  `next_token_prior` (nats, default 0) is added to the logit of every edge into the next
  expanded token's states (state u of token j + 1 from any state of token j), so that before
  the transitions have learned anything most of a state's mass goes one token ahead, where
  every aligned path goes. Uniform at the start, the dense DAG's posterior puts a masked token
  only a few percent on its own [MASK]'s states and stays on the unigram plateau on text
  (docs/learning-failures.md).
- Emissions P_u = softmax of the tied LM head at state u.
- Loss (App. H): -log of the probability of emitting [BOS, the expanded tokens in order, EOS]
  along a path from the first state to the last, divided by the target length m + s, as the
  official criterion does: the targets are the masked tokens and, between them, the [CLS]/[SEP]
  inside the block (the official criterion's targets are every expanded token's own). `maskbench.align.dag_loss` sums
  over the paths between the first and last
  state, which emit nothing there; the official code has them emit BOS and EOS, so their
  log-probabilities of [CLS] and [SEP] are added here.
- `transitions: ctc` (the official repository's "w/o transitions" criterion, `nat_ctc_loss_mlm`):
  no DAG, no alignment across tokens; each expanded token (every masked token and every
  [CLS]/[SEP], the block's ends included) is the one-token CTC target of its own k states, the
  blank being the tokenizer's [UNK] (the official dictionary's unk: a vocabulary entry under
  the LM head's softmax, which the CTC paths may emit before and after the token). The loss
  is each row's CTC negative log-likelihoods summed over its expanded tokens, divided by their
  count, averaged over the batch; a token that is itself [UNK] cannot be told from the blank
  and, as in the official criterion, is left out of both sums. The blank starts at the uniform
  share of the output distribution (`start_output_bias`): [UNK] never occurs in the train
  stream, so the frequency initialisation every head gets would give it ~1e-7, and the k states
  of a mask would all learn to emit its token until they found the blank (docs/learning-failures.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from maskbench.align import dag_loss
from maskbench.objectives.base import (FinetuneInputs, Inspection, Objective, ObjectiveOutput, SpecialTokens,
                                       check_choice, check_int, check_ratio)
from maskbench.objectives.cards import LEARNED_TRANSITIONS, card
from maskbench.objectives.masking import (Expansion, expand_tokens, gather_rows, indices_of, mask_at, mask_count,
                                          random_mask)

TRANSITIONS = ("dense", "sparse", "none", "ctc")
TRANSITION_INPUTS = ("states", "states+position", "detached+position")
DEFAULTS = card("exlm").defaults


LOG_NORM_CHUNK_ELEMENTS = 1 << 24   # float32 elements (64 MiB) of logits converted at a time


class _LogNormaliser(torch.autograd.Function):
    """logsumexp over the last dimension in float32 (float64 for float64 logits), from logits of
    any dtype, without a float32 copy of the whole (..., V) tensor: rows are converted a chunk at
    a time, forward and backward (the gradient, softmax times the upstream gradient, is written
    chunk by chunk in the logits' dtype). Only the logits and the (...,) result are kept."""

    @staticmethod
    def forward(ctx, logits):
        rows = logits.reshape(-1, logits.shape[-1])
        wide = torch.promote_types(logits.dtype, torch.float32)
        out = torch.empty(rows.shape[0], dtype=wide, device=logits.device)
        for chunk in _row_chunks(rows):
            out[chunk] = rows[chunk].to(wide).logsumexp(dim=-1)
        ctx.save_for_backward(logits, out)
        return out.view(logits.shape[:-1])

    @staticmethod
    def backward(ctx, grad):
        logits, out = ctx.saved_tensors
        rows, grad = logits.reshape(-1, logits.shape[-1]), grad.reshape(-1, 1).to(out.dtype)
        grad_rows = torch.empty_like(rows)
        for chunk in _row_chunks(rows):
            grad_rows[chunk] = ((rows[chunk].to(out.dtype) - out[chunk, None]).exp_() * grad[chunk]).to(rows.dtype)
        return grad_rows.view(logits.shape)


def _row_chunks(rows: torch.Tensor) -> list[slice]:
    """The row slices converted at a time. Under torch.compile, one: a Python loop over the row
    count would specialise the graph on it (B·L, L following each block's expanded length), a
    graph per length; inductor fuses the conversion into the reduction, so it makes no float32
    copy of the logits there either."""
    if torch.compiler.is_compiling():
        return [slice(None)]
    step = max(1, LOG_NORM_CHUNK_ELEMENTS // max(rows.shape[1], 1))
    return [slice(start, start + step) for start in range(0, rows.shape[0], step)]


def log_normaliser(logits: torch.Tensor) -> torch.Tensor:
    """logsumexp(logits, -1) in float32 whatever the logits' dtype (bf16 under autocast would
    round log Z's normaliser to ~3 digits), chunked so that no float32 copy of all the logits is
    made or kept (_LogNormaliser)."""
    return _LogNormaliser.apply(logits)


def transitions_only_log_z(log_emit: torch.Tensor, log_trans: torch.Tensor, state_group: torch.Tensor) -> torch.Tensor:
    """log Z (B,) of the DAG of emissions shaped as `log_emit` (B, M, L) with every state emitting
    every target with probability 1: the transitions' own share of the loss, which no emission can
    lower (for the uniform DAG, `none`, more than a nat per masked token; near 0 once learned
    transitions step one token ahead). `state_group` (B, L): each state's expanded token, -1 padding."""
    node_counts = (state_group >= 0).sum(dim=1)
    expanded = state_group.max(dim=1).values + 1
    return dag_loss(torch.zeros_like(log_emit), log_trans, expanded - 2, node_counts)


def forward_edges(state_token: torch.Tensor, transitions: str) -> torch.Tensor:
    """(B, L, L) boolean edges v -> u of the DAG: v < u, and for `sparse` also different tokens.
    `state_token` (B, L) is the original position each state was expanded from."""
    L = state_token.shape[1]
    edges = torch.ones(L, L, dtype=torch.bool, device=state_token.device).triu(1)[None]
    if transitions == "sparse":
        edges = edges & (state_token[:, :, None] != state_token[:, None, :])
    return edges.expand(state_token.shape[0], L, L)


def edge_log_softmax(scores: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """log-softmax of `scores` over each row's `edges`; the entries off the edges are finite (a
    fill keeps rows without successors free of NaN) and left for the caller to set to -inf."""
    return scores.masked_fill(~edges, -1e9).log_softmax(dim=-1)


def one_token_ctc_nll(log_p_token: torch.Tensor, log_p_blank: torch.Tensor) -> torch.Tensor:
    """-log P (...,) that k states emit one token by CTC, from each state's log-probability of
    the token and of the blank (..., k): P sums over the k-long paths that collapse to the token
    alone (blanks, the token once or more, blanks), by CTC's forward recursion over its three
    states (blank before, token, blank after). `F.ctc_loss` computes the same (the tests check
    it) but has no fake kernel, so torch.compile cannot capture a step that calls it whole.
    The recursion starts at the first state, so no -inf enters a logaddexp (whose gradient
    would be NaN)."""
    before, at, after = log_p_blank[..., 0], log_p_token[..., 0], None
    for t in range(1, log_p_token.shape[-1]):
        after = at + log_p_blank[..., t] if after is None else torch.logaddexp(at, after) + log_p_blank[..., t]
        at = torch.logaddexp(before, at) + log_p_token[..., t]
        before = before + log_p_blank[..., t]
    return -(at if after is None else torch.logaddexp(at, after))


def transition_head_count(value, encoder_config) -> int:
    """The knob `transition_heads` as a count: a positive integer, or `encoder` for the encoder's
    attention heads (the official code's); the heads split the width evenly."""
    heads = encoder_config.n_head if value == "encoder" else value
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise ValueError(f"transition_heads={value!r}; expected an integer >= 1 or 'encoder'")
    if encoder_config.n_embd % heads:
        raise ValueError(f"transition_heads={value!r}: {heads} heads do not split the width n_embd="
                         f"{encoder_config.n_embd} evenly")
    return heads
def next_token_edges(k: int, L: int, device=None) -> torch.Tensor:
    """(L, L) 1.0 where state u belongs to the expanded token after state v's (states laid out k
    per token, in order), else 0.0: the edges every path of the right length takes when it
    emits each masked token at its own [MASK]."""
    token = torch.arange(L, device=device) // k
    return (token[None, :] == token[:, None] + 1).float()


@dataclass(kw_only=True)
class ExLMInspection(Inspection):
    """ExLM's step as the analyses read it: its predictions are the k states of each masked
    token, and beside them the DAG they are aligned through (the alignment measures, the Fig. 10
    case study), with L states, M targets (the masked tokens and the [CLS]/[SEP] between them)."""

    # the vocabulary logits of every state (B, L, V) and each state's expanded token (B, L): 0 for
    # the first [CLS], i for target i, -1 on padding
    state_logits: torch.Tensor
    state_group: torch.Tensor
    # log Z (B,), the log-probability of the targets summed over the DAG's paths between its
    # first and last state, without the first [CLS]'s and last [SEP]'s emissions the loss adds
    # (under `transitions: ctc`, each target from its own states)
    log_z: torch.Tensor
    # the log transition matrix (B, L, L) and the emissions the DP sums, log P_u(y_i) of every
    # state u for every target (B, M, L); None under `transitions: ctc`, which has no DAG
    log_transitions: torch.Tensor | None
    log_emissions: torch.Tensor | None
    # (B, M) which targets are masked tokens
    target_is_masked: torch.Tensor


class ExLM(Objective):
    name = "exlm"
    valid_loss_measures = ("nats per masked token: the DAG's joint negative log-likelihood of the original tokens "
                           "at the fixed masked positions (summed over alignments, without the first [CLS]'s and "
                           "last [SEP]'s emissions; the [SEP]s between documents, targets of the DAG as in the "
                           "official code, are in the joint), divided by the count of masked tokens")

    def __init__(self, encoder, specials: SpecialTokens, k: int = DEFAULTS["k"],
                 mask_ratio: float = DEFAULTS["mask_ratio"], rope2d: bool = DEFAULTS["rope2d"],
                 transitions: str = DEFAULTS["transitions"], transition_input: str = DEFAULTS["transition_input"],
                 transition_heads: int | str = DEFAULTS["transition_heads"],
                 next_token_prior: float = DEFAULTS["next_token_prior"]):
        super().__init__(encoder, specials)
        self.k = check_int("k", k, 1)
        self.mask_ratio = check_ratio("mask_ratio", mask_ratio)
        if not isinstance(rope2d, bool):
            raise ValueError(f"rope2d={rope2d!r}; expected true or false")
        self.rope2d = rope2d
        self.transitions = check_choice("transitions", transitions, TRANSITIONS)
        self.transition_input = check_choice("transition_input", transition_input, TRANSITION_INPUTS)
        self.transition_heads = transition_head_count(transition_heads, encoder.config)
        if self.transition_heads > 1 and transitions not in LEARNED_TRANSITIONS:
            raise ValueError(f"transition_heads={transition_heads!r} mixes learned transitions, which "
                             f"transitions={transitions!r} has none of; expected 1, or transitions dense or sparse")
        if transitions == "ctc":
            if specials.unk is None:
                raise ValueError("transitions='ctc' needs the tokenizer's [UNK] id (SpecialTokens.unk), CTC's blank")
            self.valid_loss_measures = ("nats per masked token: the per-[MASK] CTC negative log-likelihood of the "
                                        "original tokens at the fixed masked positions (each from its own k states; "
                                        "the [SEP]s between documents, CTC targets too, summed in), divided by the "
                                        "count of masked tokens")
        if isinstance(next_token_prior, bool) or not isinstance(next_token_prior, (int, float)) or next_token_prior < 0:
            raise ValueError(f"next_token_prior={next_token_prior!r}; expected a number >= 0 (nats)")
        if next_token_prior and transitions not in LEARNED_TRANSITIONS:
            raise ValueError(f"next_token_prior needs learned transitions; transitions={transitions!r} has none")
        self.next_token_prior = float(next_token_prior)
        width = encoder.config.n_embd
        if transitions in LEARNED_TRANSITIONS:
            features = width
            if transition_input != "states":
                # an expanded block is at most k times its block: every token a [MASK] or an end
                self.transition_position = nn.Embedding(self.k * encoder.config.max_position, width)
                features += width
            self.transition_query = nn.Linear(features, width)
            self.transition_key = nn.Linear(features, width)
            if self.transition_heads > 1:
                self.transition_gate = nn.Linear(features, self.transition_heads)

    def pretraining_info(self) -> dict:
        # expanded_ids: the [CLS] and [SEP] that fine-tuning expands as `expand` does a block's ends
        return {"objective": self.name, "k": self.k, "mask_ratio": self.mask_ratio, "rope2d": self.rope2d,
                "transitions": self.transitions, "transition_input": self.transition_input,
                "transition_heads": self.transition_heads, "next_token_prior": self.next_token_prior,
                "expanded_ids": [self.specials.cls, self.specials.sep]}

    @classmethod
    def finetune_inputs(cls, info: dict, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> FinetuneInputs:
        """The batch laid out as `expand` lays out a block with no [MASK]: every [CLS] and [SEP]
        (a pair's middle one too) becomes k states at the token's position with clone indices
        1..k, as the official code expands BOS and EOS in every forward pass; other tokens keep
        clone index 0. A row with fewer of them than the batch's most ends with extra slots
        (copies of its last token, attention mask 0) after its padding. The pooler reads the
        first [CLS] state; every input token reads its first state."""
        expanded_ids = torch.tensor(info["expanded_ids"], device=input_ids.device)
        layout = expand_tokens(attention_mask.bool() & torch.isin(input_ids, expanded_ids), info["k"])
        kwargs = {"input_ids": input_ids.gather(1, layout.source), "positions": layout.source,
                  "attention_mask": attention_mask.gather(1, layout.source).masked_fill(~layout.real, 0)}
        if info["rope2d"]:
            kwargs["clone_index"] = layout.clone
        pool = torch.zeros(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
        return FinetuneInputs(kwargs, pool, token_index=layout.first)

    def expanded_positions(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> torch.Tensor:
        """(B, n) the positions, in order, of the tokens a block expands: its masked tokens and
        every [CLS]/[SEP]; n is the most any row expands, and a row expanding fewer ends with -1.
        n is read back from the device: `draw` calls this outside any compiled graph, so the
        step's shapes follow from the draws' (`Objective`)."""
        ends = torch.isin(tokens, torch.tensor([self.specials.cls, self.specials.sep], device=tokens.device))
        flags = mask_at(masked_at, tokens.shape[1]) | ends
        counts = flags.sum(dim=1, keepdim=True)
        n = int(counts.max())
        return indices_of(flags, n).masked_fill(torch.arange(n, device=tokens.device) >= counts, -1)

    @staticmethod
    def is_padded(expanded_at: torch.Tensor) -> bool:
        """Whether some row expands fewer tokens than the most (its expanded block ends with
        padding, which attention must mask). A host sync: `draw` asks, outside any graph."""
        return bool((expanded_at < 0).any())

    def expand(self, tokens: torch.Tensor, masked: torch.Tensor,
               expanded_at: torch.Tensor) -> tuple[torch.Tensor, Expansion]:
        """Encoder input ids (B, T') of the expanded block and its layout: each token at
        `expanded_at` (`expanded_positions`) becomes k states, as `finetune_inputs` lays out
        a sequence with no [MASK]."""
        # -1 (a row's padding) flags position 0, the [CLS] every row expands anyway
        flags = torch.zeros_like(masked).scatter(1, expanded_at.clamp(min=0), True)
        layout = expand_tokens(flags, self.k, most=expanded_at.shape[1])
        return tokens.masked_fill(masked, self.specials.mask).gather(1, layout.source), layout

    def log_transitions(self, states: torch.Tensor, state_token: torch.Tensor, nodes: torch.Tensor,
                        is_node: torch.Tensor | None = None) -> torch.Tensor:
        """log E (B, L, L), -inf off the DAG's edges (rows without successors are all -inf).
        `nodes` (B, L): each state's index in the expanded encoder input; `is_node` (B, L): False
        on the padding after a row's last state, which has no edges (default: no padding)."""
        edges = forward_edges(state_token, self.transitions)
        if is_node is not None:
            edges = edges & is_node[:, :, None] & is_node[:, None, :]
        if self.transitions == "none":
            uniform = edge_log_softmax(torch.zeros(edges.shape, device=states.device), edges)
            return uniform.masked_fill(~edges, float("-inf"))
        scores = self.transition_scores(states, nodes)  # (B, L, L), or (B, H, L, L) with several heads
        if self.next_token_prior:
            scores = scores + self.next_token_prior * next_token_edges(self.k, edges.shape[-1], states.device)
        if self.transition_heads == 1:
            log_e = edge_log_softmax(scores, edges)
        else:
            per_head = edge_log_softmax(scores, edges[:, None])                              # (B, H, L, L)
            log_gate = self.transition_log_gate(states, nodes).transpose(1, 2)[..., None]    # (B, H, L, 1)
            log_e = (per_head + log_gate).logsumexp(dim=1)
        return log_e.masked_fill(~edges, float("-inf"))

    def transition_features(self, states: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """What W_Q, W_K and the gate read (`transition_input`), float32; call under autocast off."""
        features = states.float()
        if self.transition_input == "detached+position":
            features = features.detach()
        if self.transition_input != "states":
            features = torch.cat([features, self.transition_position(nodes).float()], dim=-1)
        return features

    def transition_scores(self, states: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """Q Kᵀ/√d (B, L, L), or with H heads each head's (B, H, L, L) over its d/H-wide chunks
        scaled by √(d/H), in float32 even under autocast: a softmax over up to L = k·(m + 2)
        states, whose logits bf16 would round to ~3 significant digits. Autocast recasts the
        inputs of every matmul it sees, so it is switched off here rather than undone by casts."""
        with torch.autocast(device_type=states.device.type, enabled=False):
            width = states.shape[-1]
            features = self.transition_features(states, nodes)
            query, key = self.transition_query(features), self.transition_key(features)
            if self.transition_heads == 1:
                return query @ key.transpose(1, 2) / math.sqrt(width)
            query, key = (x.unflatten(-1, (self.transition_heads, -1)).transpose(1, 2) for x in (query, key))
            return query @ key.transpose(-1, -2) / math.sqrt(width // self.transition_heads)

    def transition_log_gate(self, states: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
        """log g (B, L, H): each source state's log-softmax weights over the transition heads."""
        with torch.autocast(device_type=states.device.type, enabled=False):
            return self.transition_gate(self.transition_features(states, nodes)).log_softmax(dim=-1)

    def start_output_bias(self, bias: torch.Tensor) -> None:
        """Under `transitions: ctc`, the blank ([UNK]) starts at probability 1/V whatever the
        other tokens start at (as with a zero bias), not at the frequency of a token the corpus
        never holds: a mask's CTC paths emit it in every state but one."""
        if self.transitions == "ctc":
            others = torch.cat([bias[:self.specials.unk], bias[self.specials.unk + 1:]])
            bias[self.specials.unk] = others.logsumexp(dim=0) - math.log(others.numel())

    @staticmethod
    def emission_log_probs(state_logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log P_u(y_i) (B, m, L), log normaliser (B, L)) of every state u emitting every masked
        token y_i (`targets` (B, m), in order): logit - logsumexp, gathered without a (B, L, V)
        log-softmax tensor."""
        B, L, _ = state_logits.shape
        m = targets.shape[1]
        log_norm = log_normaliser(state_logits)
        log_emit = state_logits.gather(2, targets[:, None, :].expand(B, L, m)).float() - log_norm[..., None]
        return log_emit.transpose(1, 2).contiguous(), log_norm

    def draw(self, tokens: torch.Tensor, generator: torch.Generator | None) -> dict:
        B, T = tokens.shape
        masked = random_mask(B, T, self.mask_ratio, generator, device=tokens.device)
        masked_at = indices_of(masked, mask_count(T - 2, self.mask_ratio))
        expanded_at = self.expanded_positions(tokens, masked_at)
        return {"masked_at": masked_at, "expanded_at": expanded_at, "padded": self.is_padded(expanded_at)}

    def forward(self, tokens: torch.Tensor, draws: dict) -> ObjectiveOutput:
        """The training loss, without the inspection: unlike the other objectives' (references to
        what the loss used), ExLM's would copy the masked states' logits, (B m k, V), which an
        eager training step would pay for and drop."""
        out, _ = self._step(tokens, draws, inspecting=False)
        return out

    def _step(self, tokens: torch.Tensor, draws: dict, hidden_states: bool = False,
              inspecting: bool = True) -> tuple[ObjectiveOutput, ExLMInspection | None]:
        B, T = tokens.shape
        masked_at = draws["masked_at"]
        m = masked_at.shape[1]  # the draws' shape, not mask_ratio: masked_nll passes its own
        expanded_at = draws["expanded_at"] if "expanded_at" in draws else self.expanded_positions(tokens, masked_at)
        masked = mask_at(masked_at, T)
        inputs, layout = self.expand(tokens, masked, expanded_at)
        # no mask where no row is padded (known from the draws): attention then takes its fused
        # kernels (flash attention on a GPU), which a mask rules out
        padded = draws["padded"] if "padded" in draws else self.is_padded(expanded_at)
        out = self.encoder(inputs, positions=layout.source, clone_index=layout.clone if self.rope2d else None,
                           attention_mask=layout.real.long() if padded else None, output_hidden_states=hidden_states)

        # DAG states: the expanded slots in order, k per expanded token; a row with fewer ends
        # with padding (is_node False) up to the draws' most, L
        node_counts = (layout.clone > 0).sum(dim=1)
        L = self.k * expanded_at.shape[1]
        nodes = indices_of(layout.clone > 0, L)
        is_node = torch.arange(L, device=tokens.device) < node_counts[:, None]
        states = out.last_hidden_state.gather(1, nodes[..., None].expand(-1, -1, out.last_hidden_state.shape[-1]))
        state_token = layout.source.gather(1, nodes)
        expanded = node_counts // self.k                                       # m + s per row
        state_logits = self.encoder.lm_logits(states)                         # (B, L, V)
        if self.transitions == "ctc":
            loss, log_z = self.per_mask_ctc(tokens, state_token, state_logits, is_node, expanded)
            log_trans = log_emit = None
        else:
            targets = tokens.gather(1, state_token[:, self.k:L - self.k:self.k])  # between the first and last
            log_emit, log_norm = self.emission_log_probs(state_logits, targets)
            log_trans = self.log_transitions(states, state_token, nodes, is_node)

            log_z = dag_loss(log_emit, log_trans, expanded - 2, node_counts)  # the backend `align.backend` picks
            last = (node_counts - 1)[:, None]
            log_ends = (state_logits[:, 0, self.specials.cls].float() - log_norm[:, 0]
                        + state_logits[:, :, self.specials.sep].gather(1, last)[:, 0].float()
                        - log_norm.gather(1, last)[:, 0])
            loss = -((log_z + log_ends) / expanded).mean()

        result = ObjectiveOutput(loss=loss, num_predictions=B * m)
        if not inspecting:
            return result, None
        # the predictions: the distributions of the states of masked tokens, labelled with that
        # token, masked tokens in order and k states each (m k per row: a gather, not a boolean
        # index, so that an inspected step costs no device sync)
        of_mask = indices_of(masked.gather(1, state_token) & is_node, m * self.k)
        return (result,
                ExLMInspection(logits=gather_rows(state_logits, of_mask).flatten(0, 1),
                               labels=tokens.gather(1, state_token.gather(1, of_mask)).flatten(),
                               hidden_states=out.hidden_states, input_is_mask=inputs == self.specials.mask,
                               input_is_frame=self.frame_slots(layout, T), state_logits=state_logits,
                               log_transitions=log_trans, log_z=log_z, log_emissions=log_emit,
                               state_group=torch.where(is_node, torch.arange(L, device=tokens.device) // self.k, -1),
                               target_is_masked=masked.gather(1, state_token[:, self.k:L - self.k:self.k])
                               & (torch.arange(L // self.k - 2, device=tokens.device) < expanded[:, None] - 2)))

    def per_mask_ctc(self, tokens: torch.Tensor, state_token: torch.Tensor, state_logits: torch.Tensor,
                     is_node: torch.Tensor, expanded: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(loss, log Z (B,)) of `transitions: ctc`: every expanded token the CTC target of its own
        k states (module docstring). log Z, the analogue of the DAG's: the log-likelihood of the
        tokens between the first [CLS] and the last [SEP] (the masked tokens and the inner
        [CLS]/[SEP]); a token that is [UNK], the blank, counts in neither."""
        B, L, _ = state_logits.shape
        own = tokens.gather(1, state_token)                                    # (B, L) each state's token
        log_norm = log_normaliser(state_logits)
        log_p_own = state_logits.gather(2, own[..., None])[..., 0].float() - log_norm
        log_p_blank = state_logits[..., self.specials.unk].float() - log_norm
        n = L // self.k
        nll = one_token_ctc_nll(log_p_own.view(B, n, self.k), log_p_blank.view(B, n, self.k))
        counted = is_node[:, ::self.k] & (own[:, ::self.k] != self.specials.unk)
        nll = nll.masked_fill(~counted, 0.0)
        column = torch.arange(n, device=tokens.device)
        inner = (column > 0) & (column < expanded[:, None] - 1)
        return (nll.sum(dim=1) / counted.sum(dim=1)).mean(), -nll.masked_fill(~inner, 0.0).sum(dim=1)

    @staticmethod
    def frame_slots(layout: Expansion, length: int) -> torch.Tensor:
        """(B, T') the slots that are not the block's body: the first [CLS]'s and last [SEP]'s
        states and the padding."""
        return (layout.source == 0) | (layout.source == length - 1) | ~layout.real

    def masked_nll(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """-log Z: the masked tokens' joint likelihood under the DAG, all alignments summed (under
        `ctc`, each from its own states), without the first [CLS]'s and last [SEP]'s emissions the
        loss adds (they are not masked tokens); [SEP]s between documents are targets of the DAG
        and stay in the joint."""
        return -self.inspect(tokens, {"masked_at": masked_at}).log_z.sum(), masked_at.numel()

    def masked_nll_floor(self, tokens: torch.Tensor, masked_at: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The part of `masked_nll` no emission can lower: the DAG's transitions alone
        (`transitions_only_log_z`); none under `ctc`, whose paths carry no transition probabilities."""
        if self.transitions == "ctc":
            return super().masked_nll_floor(tokens, masked_at)
        seen = self.inspect(tokens, {"masked_at": masked_at})
        return -transitions_only_log_z(seen.log_emissions, seen.log_transitions.float(), seen.state_group).sum(), \
            masked_at.numel()

    @staticmethod
    def top_tokens(state_logits: torch.Tensor, n: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
        """The n most probable tokens of every state and their probabilities (Fig. 10)."""
        probs, ids = state_logits.float().softmax(dim=-1).topk(n, dim=-1)
        return ids, probs
