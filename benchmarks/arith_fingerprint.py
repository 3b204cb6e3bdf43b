"""Where two CPUs' arithmetic parts: a fingerprint of every intermediate of a few pretraining
steps, to be diffed against the same fingerprint taken on another machine.

The reproducible CPU mode (maskbench.cpu_mode) trains the same bits on every AMD EPYC measured,
with AVX2 or AVX-512, but not on an Intel Xeon (docs/reproducibility.md). Final weights only say
*that* the two differ; this says *where*: it seeds the maskbench MLM at params.yaml's `pretrain`
size, runs `--steps` training steps with a hook on every module, and records the SHA-256 of
the initial weights, of each module's output and of each gradient flowing back into it, of each
parameter's gradient and of the weights after every AdamW step, in execution order; then a few
primitives alone on seeded inputs (a matrix product, attention, layer norm, GELU, log-softmax,
exp), which tell MKL's matrix products from ATen's own kernels. Diff two fingerprints and the
first entry that differs names the operation whose rounding depends on the CPU.

    python benchmarks/arith_fingerprint.py --mode reproducible  # results/arith_fingerprint/<cpu>-<mode>.json
    python benchmarks/arith_fingerprint.py --compare A.json B.json

The mode is put in force before torch is imported, as a maskbench job does; one thread, as a job
runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import warnings
from pathlib import Path

from bench_cpu_mode import VOCAB, encoder_at_pretrain_size

OUT = Path("benchmarks/results/arith_fingerprint")


def digest(tensor) -> str:
    return hashlib.sha256(tensor.detach().contiguous().numpy().tobytes()).hexdigest()[:16]


def seeded(seed: int, *shape: int):
    """Standard normal float32 values drawn by numpy, whose generator takes no CPU-dependent path
    (torch's `randn` takes ATen's vectorised one), so both machines start from the same bits."""
    import numpy as np
    import torch

    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))


def trace_training(steps: int) -> list[list[str]]:
    """[name, hash] of every intermediate of `steps` seeded training steps, in execution order."""
    import torch

    from maskbench.config import load_params
    from maskbench.objectives.registry import MaskedLM, SpecialTokens

    params = load_params()
    pretrain = params["pretrain"]
    torch.manual_seed(0)  # dropout's draws
    model = MaskedLM(encoder_at_pretrain_size(params), SpecialTokens(pad=0, cls=2, sep=3, mask=4))
    batch = torch.randint(5, VOCAB, (pretrain["micro_batch_size"], pretrain["seq_len"]),
                          generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # matrices from numpy (vectors are constants already), as BERT's N(0, 0.02)
        for i, p in enumerate(p for p in model.parameters() if p.dim() > 1):
            p.copy_(seeded(100 + i, *p.shape) * 0.02)
    trace = [[f"init {name}", digest(p)] for name, p in model.named_parameters()]
    step = [0]

    def record(kind):
        def hook(module, _, output):
            tensors = output if isinstance(output, tuple) else (output,)
            for i, t in enumerate(tensors):
                if isinstance(t, torch.Tensor):
                    trace.append([f"step {step[0]} {kind} {module._fingerprint_name}[{i}]", digest(t)])
        return hook

    warnings.filterwarnings("ignore", message=".*backward hook")  # modules whose output is not a tensor
    for name, module in model.named_modules():
        module._fingerprint_name = name or "model"
        module.register_forward_hook(record("forward"))
        module.register_full_backward_hook(record("grad into"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step[0] in range(steps):
        loss = model(batch, model.draw(batch, torch.Generator().manual_seed(step[0]))).loss
        trace.append([f"step {step[0]} loss", digest(loss)])
        loss.backward()
        trace += [[f"step {step[0]} grad {name}", digest(p.grad)] for name, p in model.named_parameters()
                  if p.grad is not None]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        trace += [[f"step {step[0]} after AdamW {name}", digest(p)] for name, p in model.named_parameters()]
    return trace


def primitives() -> dict[str, str]:
    """The hash of a few operations alone on seeded inputs of a pretraining step's shapes."""
    import torch.nn.functional as F

    x, w = seeded(2, 512, 256), seeded(3, 1024, 256)
    q, k, v = (seeded(4 + i, 4, 4, 128, 64) for i in range(3))
    return {"mm (MKL sgemm)": digest(x @ w.T), "linear with bias": digest(F.linear(x, w, w[:, 0])),
            "scaled_dot_product_attention": digest(F.scaled_dot_product_attention(q, k, v)),
            "layer_norm": digest(F.layer_norm(x, (256,))), "gelu": digest(F.gelu(x)),
            "log_softmax": digest(F.log_softmax(x, -1)), "exp": digest(x.exp()), "sum": digest(x.sum(0))}


def take(mode: str, steps: int, folder: Path) -> Path:
    from maskbench import cpu_mode

    cpu_mode.apply(mode)
    import torch

    from maskbench.io import write_text
    from maskbench.provenance import arithmetic

    torch.set_num_threads(1)
    record = arithmetic()  # its `cpu_arithmetic` says what the mode put in force
    found = {"arithmetic": record, "primitives": primitives(), "trace": trace_training(steps)}
    out = folder / (re.sub(r"[^a-z0-9]+", "-", f"{record['cpu']} {mode}".lower()).strip("-") + ".json")
    write_text(out, json.dumps(found, indent=1) + "\n")
    return out


def compare(a: Path, b: Path) -> int:
    """Print the primitives that differ and the first trace entry that does; 1 if any differs."""
    one, two = (json.loads(p.read_text()) for p in (a, b))
    print(f"{a}: {one['arithmetic']}\n{b}: {two['arithmetic']}")
    differ = [name for name in one["primitives"] if one["primitives"][name] != two["primitives"].get(name)]
    print("primitives that differ: " + (", ".join(differ) or "none"))
    first = next((x for x, y in zip(one["trace"], two["trace"]) if x != y), None)
    print("first trace entry that differs: " + (first[0] if first else "none")
          + ("" if len(one["trace"]) == len(two["trace"]) else " (the traces' lengths differ)"))
    return int(bool(differ or first))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="reproducible", choices=["native", "reproducible"])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    parser.add_argument("--out", type=Path, default=OUT, help="the folder of the fingerprints")
    args = parser.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    print(take(args.mode, args.steps, args.out))


if __name__ == "__main__":
    main()
