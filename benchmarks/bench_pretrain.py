"""Pretraining throughput of the maskbench encoder + MLM vs `transformers.BertForMaskedLM`.

Same size (params.yaml `pretrain.model`), same batch, same masked positions, fp32, training
steps (forward + backward + AdamW). Both are timed in one run, interleaved, so the ratio is
robust to whatever else the machine is doing.

    python benchmarks/bench_pretrain.py                 # tiny size, writes benchmarks/results/pretrain_cpu.json
    python benchmarks/bench_pretrain.py --size base-text --device cuda
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM

from maskbench.config import load_params
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import MaskedLM, SpecialTokens
from maskbench.objectives.masking import random_mask

SPECIALS = SpecialTokens(pad=0, cls=2, sep=3, mask=4)


def maskbench_step(batch: torch.Tensor, size: dict, vocab: int, seq_len: int, device):
    objective = MaskedLM(Encoder(EncoderConfig(vocab_size=vocab, max_position=seq_len, **size)), SPECIALS).to(device)
    optimizer = torch.optim.AdamW(objective.parameters(), lr=1e-4)

    def step():
        draws = objective.draw(batch, torch.Generator(device=device).manual_seed(0))
        objective(batch, draws).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def hf_bert_step(batch: torch.Tensor, size: dict, vocab: int, seq_len: int, device):
    config = BertConfig(vocab_size=vocab, hidden_size=size["n_embd"], num_hidden_layers=size["n_layer"],
                        num_attention_heads=size["n_head"], intermediate_size=size.get("n_inner", 4 * size["n_embd"]),
                        max_position_embeddings=seq_len, attn_implementation="sdpa")
    model = BertForMaskedLM(config).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    masked = random_mask(batch.shape[0], batch.shape[1], 0.15, torch.Generator(device=device).manual_seed(0), device)
    inputs = batch.masked_fill(masked, SPECIALS.mask)
    labels = batch.masked_fill(~masked, -100)  # same positions scored as maskbench's MLM

    def step():
        model(input_ids=inputs, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", help="a params.yaml model_sizes key (default: pretrain.model)")
    parser.add_argument("--batch", type=int, help="default: pretrain.batch_size")
    parser.add_argument("--seq-len", type=int, help="default: pretrain.seq_len")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model (after 3 warm-up steps)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="benchmarks/results/pretrain_cpu.json")
    args = parser.parse_args()

    params = load_params()
    size_name = args.size or params["pretrain"]["model"]
    size = params["model_sizes"][size_name]
    batch_size = args.batch or params["pretrain"]["micro_batch_size"]
    seq_len = args.seq_len or params["pretrain"]["seq_len"]
    device = torch.device(args.device)
    torch.manual_seed(0)
    batch = torch.randint(5, args.vocab, (batch_size, seq_len), device=device)
    batch[:, 0], batch[:, -1] = SPECIALS.cls, SPECIALS.sep
    steps = {"maskbench": maskbench_step(batch, size, args.vocab, seq_len, device),
             "hf_bert": hf_bert_step(batch, size, args.vocab, seq_len, device)}
    for step in steps.values():
        for _ in range(3):
            step()
    times = {name: [] for name in steps}
    for _ in range(args.steps):
        for name, step in steps.items():  # interleaved: both see the same machine load
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    tokens = batch_size * seq_len
    result = {
        "size": size_name, **size, "batch": batch_size, "seq_len": seq_len, "vocab": args.vocab,
        "device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "tokens_per_s": {name: tokens / statistics.median(t) for name, t in times.items()},
    }
    result["ratio_maskbench_over_hf"] = result["tokens_per_s"]["maskbench"] / result["tokens_per_s"]["hf_bert"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
