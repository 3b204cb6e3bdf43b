"""A pre-norm Transformer encoder that saves and loads as a `transformers` model.

One model family for every objective: the objective decides what goes in (token ids,
positions, clone indices, an attention mask) and what comes out of the hidden states; the
encoder only maps inputs to per-layer states. The LM head is tied to the input embedding
(logits = LN(GELU(W h)) Eᵀ + b), as in BERT/RoBERTa, so ExLM's emissions and MLM's
predictions come from the same matrix that embeds the tokens.

    model = Encoder(EncoderConfig(vocab_size=8192, n_layer=2, n_embd=128, n_head=4))
    out = model(input_ids)                  # out.last_hidden_state: (B, T, n_embd)
    logits = model.lm_logits(out.last_hidden_state)
    model.save_pretrained("ckpt"); Encoder.from_pretrained("ckpt")
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

POSITION_SCHEMES = ("absolute",)


class EncoderConfig(PretrainedConfig):
    model_type = "maskbench-encoder"

    def __init__(
        self,
        vocab_size: int = 8192,
        n_layer: int = 2,
        n_embd: int = 128,
        n_head: int = 4,
        n_inner: int | None = None,
        max_position: int = 512,
        position_scheme: str = "absolute",
        dropout: float = 0.1,
        layer_norm_eps: float = 1e-5,
        pad_token_id: int = 0,
        pretraining: dict | None = None,
        **kwargs,
    ):
        if position_scheme not in POSITION_SCHEMES:
            raise ValueError(f"position_scheme={position_scheme!r}; expected one of {POSITION_SCHEMES}")
        if n_embd % n_head:
            raise ValueError(f"n_embd={n_embd} must be divisible by n_head={n_head}")
        self.vocab_size = vocab_size
        self.n_layer = n_layer
        self.n_embd = n_embd
        self.n_head = n_head
        self.n_inner = n_inner or 4 * n_embd
        self.max_position = max_position
        self.position_scheme = position_scheme
        self.dropout = dropout
        self.layer_norm_eps = layer_norm_eps
        # What trained this encoder (objective name and knobs): fine-tuning reads it to
        # present inputs the way the encoder saw them (e.g. repeated tokens, clone index 0).
        self.pretraining = pretraining or {}
        super().__init__(pad_token_id=pad_token_id, **kwargs)


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None


class SelfAttention(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.dropout if self.training else 0.0
        )
        return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.fc = nn.Linear(config.n_embd, config.n_inner)
        self.proj = nn.Linear(config.n_inner, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), attn_mask)
        return x + self.mlp(self.ln_2(x))


class Encoder(PreTrainedModel):
    config_class = EncoderConfig
    base_model_prefix = "encoder"
    _supports_sdpa = True

    def __init__(self, config: EncoderConfig):
        super().__init__(config)
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.max_position, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.lm_dense = nn.Linear(config.n_embd, config.n_embd)
        self.lm_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.lm_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.tok_emb

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        output_hidden_states: bool = False,
    ) -> EncoderOutput:
        """Encode `input_ids` (B, T).

        attention_mask: (B, T), 1 for real tokens and 0 for padding (keys are masked).
        positions: (B, T) position ids; default 0..T-1 (objectives that drop or repeat
            tokens pass the original positions).
        attn_mask: (B or 1, 1, T, T) boolean, True where a query may attend to a key; for
            objectives with structured attention (causal, two-stream).
        """
        B, T = input_ids.shape
        if positions is None:
            positions = torch.arange(T, device=input_ids.device).expand(B, T)
        if T > self.config.max_position or int(positions.max()) >= self.config.max_position:
            raise ValueError(
                f"position {int(positions.max())} exceeds max_position={self.config.max_position}"
            )
        mask = _combine_masks(attention_mask, attn_mask)
        x = self.drop(self.tok_emb(input_ids) + self.pos_emb(positions))
        hidden = [x] if output_hidden_states else None
        for block in self.blocks:
            x = block(x, mask)
            if hidden is not None:
                hidden.append(x)
        x = self.ln_f(x)
        if hidden is not None:
            hidden[-1] = x
        return EncoderOutput(last_hidden_state=x, hidden_states=tuple(hidden) if hidden else None)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits through the head tied to the input embedding."""
        h = self.lm_ln(F.gelu(self.lm_dense(hidden)))
        return F.linear(h, self.tok_emb.weight, self.lm_bias)

    def num_parameters_excluding_embeddings(self) -> int:
        return sum(p.numel() for n, p in self.named_parameters() if not n.endswith("_emb.weight"))


def _combine_masks(attention_mask: torch.Tensor | None, attn_mask: torch.Tensor | None):
    """One boolean SDPA mask from key padding and structural masks (None when neither:
    SDPA then takes its fastest kernel)."""
    if attention_mask is None:
        return attn_mask
    keys = attention_mask.bool()[:, None, None, :]
    return keys if attn_mask is None else keys & attn_mask


def _register() -> None:
    AutoConfig.register(EncoderConfig.model_type, EncoderConfig, exist_ok=True)
    AutoModel.register(EncoderConfig, Encoder, exist_ok=True)


_register()
