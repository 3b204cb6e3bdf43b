"""Training throughput of every pretraining objective relative to MLM, at one model size.

One training step = forward, backward and an AdamW update on a batch of [CLS] … [SEP] blocks
of random tokens. Every objective trains the same encoder size; tokens/s counts the tokens of
the original blocks, so an objective that lengthens its input (repeated MLM, ExLM, the two
streams of DAR) pays for it in this number. Objectives are timed in interleaved rounds and each
reports its fastest round: on a shared machine other load only ever adds time, so the minimum
is the least noisy estimate (the median is reported beside it).

Each objective's step is also counted in floating-point operations (torch's FlopCounterMode:
matrix products and attention, forward and backward), which does not depend on how busy the
machine is and says what the step costs where matrix products dominate (GPUs).

ExLM (k=4) is also timed with the states-alignment DP replaced by a stand-in of the same inputs
(`exlm_k4_without_dp`), which splits its extra cost into the longer encoder input + larger LM
head on one side and the DP on the other. The paper measured ExLM(k=4) at 1.9x an MLM step;
the issue's target is at most 2x at p = 0.15.

With `--compile` every objective runs under torch.compile(fullgraph=True), as `compile: true`
trains it; the report then gives each step's achieved TFLOP/s, and with `--peak-tflops` (the
device's dense bf16 peak, e.g. 989 for an H100 SXM) the fraction of that peak.

    PYTHONPATH=src python benchmarks/bench_objectives.py        # writes benchmarks/results/objectives_cpu.json
    PYTHONPATH=src python benchmarks/bench_objectives.py --device cuda --batch 32 --seq-len 512 --size base-text \
        --vocab 32768 --compile --peak-tflops 989 --out benchmarks/results/objectives_gpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from maskbench.config import load_params
from maskbench.model.encoder import Encoder, EncoderConfig
from maskbench.objectives.registry import SpecialTokens, build_objective, encoder_settings
from maskbench.objectives import exlm as exlm_module
from maskbench.objectives.cards import run_card

RESULTS = Path(__file__).resolve().parent / "results"
SPECIALS = SpecialTokens(pad=0, cls=1, sep=2, mask=3)
# The papers' default knobs, all at p = 0.15 where a ratio applies. The first step of each
# objective is the one its row of params.yaml `throughput` quotes (`throughput_steps`).
RUNS = {
    "mlm": ("mlm", {"mask_ratio": 0.15}),
    "varlen_mlm": ("varlen_mlm", {"mask_ratio_min": 0.15, "mask_ratio_max": 0.3}),
    "repeated_mlm_k2": ("repeated_mlm", {"k": 2, "mask_ratio": 0.15}),
    "mae_lm": ("mae_lm", {"mask_ratio": 0.15, "decoder_layers": 1}),
    "exlm_k2": ("exlm", {"k": 2, "mask_ratio": 0.15}),
    "exlm_k4": ("exlm", {"k": 4, "mask_ratio": 0.15}),
    "exlm_k4_without_dp": ("exlm", {"k": 4, "mask_ratio": 0.15}),
    "ar": ("ar", {}),
    "dar": ("dar", {"t": 2}),
    "exlm_k8": ("exlm", {"k": 8, "mask_ratio": 0.15}),
    "mae_lm_4layer_decoder": ("mae_lm", {"mask_ratio": 0.15, "decoder_layers": 4}),  # MAE-LM's paper decoder
}


def throughput_steps() -> dict[str, str]:
    """The step each `throughput.<device>.pretrain` key is measured by: its objective's first in RUNS."""
    steps = {}
    for step, (objective, _) in RUNS.items():
        steps.setdefault(run_card({"objective": objective}).throughput_key, step)
    return steps


def no_alignment(log_emit: torch.Tensor, log_trans: torch.Tensor, *lengths: torch.Tensor) -> torch.Tensor:
    """A stand-in for the DP (`dag_loss`) that still uses (and backpropagates into) both of its
    tensors; the lengths the DP reads are not needed."""
    return log_emit.amax(dim=2).sum(dim=1) + log_trans.masked_fill(torch.isinf(log_trans), 0).mean(dim=(1, 2))


def build(name: str, size: dict, vocab: int, seq_len: int, positions: str, device) -> torch.nn.Module:
    """The objective under the position setting `positions`, with `encoder_input_length`
    updated on every encoder call."""
    objective, knobs = RUNS[name]
    run = {"objective": objective, "knobs": knobs}
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=vocab, dropout=0.1, **size, **encoder_settings(run, seq_len, positions))
    model = build_objective(run, Encoder(config), SPECIALS).to(device)

    def record_length(module, args):
        model.encoder_input_length = args[0].shape[1]
    model.encoder.register_forward_pre_hook(record_length)
    return model


def make_step(model, device):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def step(tokens, generator):
        with autocast:
            loss = model(tokens, model.draw(tokens, generator)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
    return step


def time_step(name, step, tokens, generator, steps: int) -> float:
    original = exlm_module.dag_loss
    if name.endswith("without_dp"):
        exlm_module.dag_loss = no_alignment
    try:
        start = time.perf_counter()
        for _ in range(steps):
            step(tokens, generator)
        return (time.perf_counter() - start) / steps
    finally:
        exlm_module.dag_loss = original


def count_flops(name, step, tokens, generator) -> int:
    with FlopCounterMode(display=False) as counter:
        time_step(name, step, tokens, generator, 1)
    return counter.get_total_flops()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", help="a params.yaml model_sizes key (default: pretrain.model)")
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per block, [CLS] and [SEP] included")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary size (the tiny text tokenizer's)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per objective per round")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds; each objective reports its fastest")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--only", nargs="*", choices=sorted(RUNS), help="time only these (mlm is always timed)")
    parser.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True) every objective")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's dense peak (bf16 on cuda) in TFLOP/s, to report the fraction reached")
    parser.add_argument("--out", type=Path, default=None, help="JSON report (default results/objectives_<device>.json)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    names = ["mlm"] + [n for n in (args.only or RUNS) if n != "mlm"]
    params = load_params()
    size_name = args.size or params["pretrain"]["model"]
    size = params["model_sizes"][size_name]
    tokens = torch.randint(4, args.vocab, (args.batch, args.seq_len), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, -1] = SPECIALS.cls, SPECIALS.sep
    tokens = tokens.to(device)

    load_before = os.getloadavg()  # the machine may be shared: the report says how busy it was
    steps, lengths, flops, times = {}, {}, {}, {name: [] for name in names}
    for name in names:
        model = build(name, size, args.vocab, args.seq_len, params["pretrain"]["positions"], device)
        steps[name] = make_step(model, device)
        flops[name] = count_flops(name, steps[name], tokens, torch.Generator(device).manual_seed(0))  # and warm-up
        lengths[name] = model.encoder_input_length
        if args.compile:  # FLOPs and lengths are counted eagerly above: the same computation
            # every objective class compiles its own graph: more than dynamo's default limit of 8
            torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
            steps[name] = make_step(torch.compile(model, fullgraph=True), device)
            time_step(name, steps[name], tokens, torch.Generator(device).manual_seed(0), 1)  # compiles
    for r in range(args.rounds):
        for name in names:
            generator = torch.Generator(device).manual_seed(r)
            times[name].append(time_step(name, steps[name], tokens, generator, args.steps))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {times[n][-1] * 1e3:.0f} ms"
                                                           for n in names), flush=True)

    step_s = {name: min(t) for name, t in times.items()}
    block_tokens = args.batch * args.seq_len
    report = {
        "what": "training step (forward + backward + AdamW) per objective, fastest of interleaved rounds",
        "machine": {"device": str(device), "threads": args.threads, "platform": platform.platform(),
                    "torch": torch.__version__,
                    "load_average_1_5_15_min": {"before": load_before, "after": os.getloadavg()}},
        "settings": {"size": size_name, **size, "positions": params["pretrain"]["positions"],
                     "batch": args.batch, "seq_len": args.seq_len,
                     "vocab": args.vocab, "steps_per_round": args.steps, "rounds": args.rounds,
                     "compile": args.compile, "peak_tflops": args.peak_tflops},
        "objectives": {
            name: {"objective": RUNS[name][0], "knobs": RUNS[name][1], "step_ms": round(step_s[name] * 1e3, 1),
                   "median_step_ms": round(statistics.median(times[name]) * 1e3, 1),
                   "encoder_input_length": lengths[name], "tokens_per_s": round(block_tokens / step_s[name]),
                   "tokens_per_s_relative_to_mlm": round(step_s["mlm"] / step_s[name], 3),
                   "gflop_per_step": round(flops[name] / 1e9, 2),
                   "flop_relative_to_mlm": round(flops[name] / flops["mlm"], 3),
                   "tflop_per_s": round(flops[name] / step_s[name] / 1e12, 3),
                   **({"fraction_of_peak": round(flops[name] / step_s[name] / 1e12 / args.peak_tflops, 3)}
                      if args.peak_tflops else {})}
            for name in names
        },
    }
    if "exlm_k4" in step_s:
        report["exlm_k4_vs_mlm"] = {
            "step_ratio": round(step_s["exlm_k4"] / step_s["mlm"], 3), "target": 2.0, "paper": 1.9,
            "flop_ratio": round(flops["exlm_k4"] / flops["mlm"], 3),
            "meets_target": step_s["exlm_k4"] <= 2.0 * step_s["mlm"],
        }
        if "exlm_k4_without_dp" in step_s:
            report["exlm_k4_vs_mlm"]["step_ratio_without_dp"] = round(step_s["exlm_k4_without_dp"] / step_s["mlm"], 3)
            report["exlm_k4_vs_mlm"]["dp_share_of_step"] = round(
                1 - step_s["exlm_k4_without_dp"] / step_s["exlm_k4"], 3)
    out = args.out or RESULTS / f"objectives_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name, row in report["objectives"].items():
        print(f"{name:20s} tokens/s vs mlm {row['tokens_per_s_relative_to_mlm']:6.3f}   "
              f"FLOP vs mlm {row['flop_relative_to_mlm']:6.3f}   encoder input {row['encoder_input_length']}")
    if "exlm_k4_vs_mlm" in report:
        print("exlm_k4_vs_mlm:", report["exlm_k4_vs_mlm"])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
