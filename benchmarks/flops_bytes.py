"""FLOPs and bytes moved per training step, per objective: what a step costs, independent of
the machine that runs it.

One step = forward, backward and AdamW (bench_objectives' step, bf16 autocast on CUDA, float32
on the CPU). FLOPs are torch's FlopCounterMode count (matrix products and attention, forward and
backward). Bytes moved are the sizes of every tensor each ATen operator reads and writes (its
tensor arguments and results), summed over the step's operators: what an unfused eager step
moves through memory at least once per operator, the figure fusion and lower precision lower.
Operators are split into matrix products (mm, bmm, addmm, attention, ...) and the rest
(elementwise, reductions, copies, the optimizer), so the report shows where the bytes are that
no matrix unit helps with. The ratio FLOP/byte against a device's ratio of peak FLOP/s to
bandwidth (e.g. an H200's 989 TFLOP/s bf16 over 4.8 TB/s: 206) says which bound a step is near.

    PYTHONPATH=src python benchmarks/flops_bytes.py            # prints the table, writes results/flops_bytes_cpu.json
    PYTHONPATH=src python benchmarks/flops_bytes.py --size base-text --batch 2 --seq-len 512 --vocab 32768
"""

from __future__ import annotations

import argparse
import json
import platform
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from bench_objectives import RUNS, SPECIALS, build, make_step
from maskbench.config import load_params

RESULTS = Path(__file__).resolve().parent / "results"
COUNTED = ("mlm", "mae_lm", "mae_lm_4layer_decoder", "exlm_k4", "exlm_k8", "repeated_mlm_k2", "ar", "dar")
MATRIX_OPS = ("mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "_scaled_dot_product", "convolution")


class BytesMoved(TorchDispatchMode):
    """Sums the bytes of every tensor an ATen operator takes or returns, by operator kind."""

    def __init__(self):
        super().__init__()
        self.bytes = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs or {}, out))[0] if isinstance(t, torch.Tensor)]
        name = func.__name__.split(".")[0]
        kind = "matrix" if any(name.startswith(op) for op in MATRIX_OPS) else "other"
        self.bytes[kind] += sum(t.numel() * t.element_size() for t in tensors)
        return out


def count(name: str, size: dict, vocab: int, tokens: torch.Tensor, positions: str) -> dict:
    model = build(name, size, vocab, tokens.shape[1], positions, tokens.device)
    step = make_step(model, tokens.device)
    step(tokens, torch.Generator(tokens.device).manual_seed(0))          # AdamW's state exists from here on
    with FlopCounterMode(display=False) as flops, BytesMoved() as moved:
        step(tokens, torch.Generator(tokens.device).manual_seed(1))
    total = sum(moved.bytes.values())
    return {"objective": RUNS[name][0], "knobs": RUNS[name][1], "encoder_input_length": model.encoder_input_length,
            "gflop": round(flops.get_total_flops() / 1e9, 3), "gb_moved": round(total / 1e9, 3),
            "gb_moved_matrix_ops": round(moved.bytes["matrix"] / 1e9, 3),
            "gb_moved_other_ops": round(moved.bytes["other"] / 1e9, 3),
            "flop_per_byte": round(flops.get_total_flops() / total, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", help="a params.yaml model_sizes key (default: pretrain.model)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--only", nargs="*", choices=COUNTED)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    params = load_params()
    size_name = args.size or params["pretrain"]["model"]
    device = torch.device(args.device)
    tokens = torch.randint(4, args.vocab, (args.batch, args.seq_len), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, -1] = SPECIALS.cls, SPECIALS.sep
    rows = {name: count(name, params["model_sizes"][size_name], args.vocab, tokens.to(device),
                        params["pretrain"]["positions"]) for name in (args.only or COUNTED)}
    for name, row in rows.items():
        row["gflop_relative_to_mlm"] = round(row["gflop"] / rows["mlm"]["gflop"], 3) if "mlm" in rows else None
        row["gb_moved_relative_to_mlm"] = round(row["gb_moved"] / rows["mlm"]["gb_moved"], 3) if "mlm" in rows else None
    report = {"what": __doc__.split("\n\n")[0], "how": "FlopCounterMode; bytes = sum over ATen operators of the sizes "
              "of their tensor arguments and results (one forward + backward + AdamW step, after a first step)",
              "machine": {"device": str(device), "torch": torch.__version__, "platform": platform.platform()},
              "settings": {"size": size_name, **params["model_sizes"][size_name], "batch": args.batch,
                           "seq_len": args.seq_len, "vocab": args.vocab, "positions": params["pretrain"]["positions"],
                           "autocast_bf16": device.type == "cuda"},
              "objectives": rows}
    out = args.out or RESULTS / f"flops_bytes_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'objective':24s} {'input':>6s} {'GFLOP':>9s} {'GB moved':>9s} {'of which matmul':>15s} "
          f"{'FLOP/byte':>9s} {'FLOP vs mlm':>11s} {'bytes vs mlm':>12s}")
    for name, row in rows.items():
        print(f"{name:24s} {row['encoder_input_length']:6d} {row['gflop']:9.2f} {row['gb_moved']:9.2f} "
              f"{row['gb_moved_matrix_ops']:15.2f} {row['flop_per_byte']:9.1f} {row['gflop_relative_to_mlm']:11.3f} "
              f"{row['gb_moved_relative_to_mlm']:12.3f}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
