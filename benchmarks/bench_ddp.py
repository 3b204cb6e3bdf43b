"""Pretraining throughput per process on 1 and on N data-parallel processes, through the
workflow's own launcher (`maskbench pretrain` with params.yaml `launch.gpus: N`).

Weak scaling: each process trains micro-batches of the same size with one accumulation step, so
the global batch is micro-batch × N and a process's work per step is the same at every N; the
per-process tokens/s at N against 1 is the scaling efficiency (what the gradient all-reduce and
the collective stop flag cost). The corpus is synthetic (random words, a WordPiece vocabulary
trained on them): throughput does not depend on what the tokens say, and the benchmark needs no
download. tokens/s is the median over the run's logged windows after the first (warm-up,
compilation of kernels).

    PYTHONPATH=src python benchmarks/bench_ddp.py --processes 1 2 --runs mlm exlm --steps 60   # CPU, gloo
    PYTHONPATH=src python benchmarks/bench_ddp.py --device cuda --processes 1 2 --runs mlm exlm --steps 200 \\
        --size base-text --seq-len 512 --micro-batch 32 --vocab 32768 --out benchmarks/results/ddp_gpu.json
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def synthetic_corpus(root: Path, vocab: int, words: int, seed: int = 0) -> None:
    """Token streams, tokenizer and data card of random text, where the pretrain stage reads them."""
    from maskbench.data.corpus import tokenize_corpus
    from maskbench.data.tokenizers import train_wordpiece

    rng = np.random.default_rng(seed)
    lexicon = np.array([f"w{i}" for i in range(vocab)])
    documents = {split: [" ".join(rng.choice(lexicon, 500)) for _ in range(max(2, words // 500))]
                 for split, words in (("train", words), ("valid", 20_000), ("test", 1_000))}
    tokenizer = train_wordpiece(documents["train"], vocab_size=vocab, min_frequency=1, lowercase=True,
                                out_dir=root / "data/tokenizer/text")
    tokenize_corpus(documents, tokenizer, root / "data/tokens/text")
    card = root / "data/cards/download-wikitext2.json"
    card.parent.mkdir(parents=True, exist_ok=True)
    card.write_text(json.dumps({"source": {"files": {"synthetic": "0" * 64}}}))


def workspace(root: Path, corpus: Path, args, processes: int) -> Path:
    """The repository's params.yaml (tiny profile) with the benchmark's size, batch and launch."""
    root.mkdir(parents=True)
    for name in ("params.yaml", "workflow"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, root / name)
    shutil.copytree(corpus / "data", root / "data")
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["profile"] = "tiny"
    params["pretrain"].update(model=args.size, seq_len=args.seq_len, micro_batch_size=args.micro_batch,
                              batch_size=args.micro_batch * processes, steps=args.steps, warmup_steps=10,
                              log_every=args.log_every, eval_every=args.steps, eval_blocks=4,
                              checkpoint_every=args.steps, device=args.device, threads=args.threads)
    params["launch"] = {"gpus": processes, "nodes": 1}
    for run in args.runs:  # the run's own settings but the size, batch and budget of the benchmark
        params["runs"][run].pop("overrides", None)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def measure(root: Path, run: str, processes: int, args) -> dict:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    tick = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "maskbench.cli", "pretrain", "--run", run], cwd=root, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - tick
    if done.returncode:
        raise RuntimeError(f"{run} on {processes} process(es) failed:\n{done.stderr[-3000:]}")
    with open(root / f"runs/pretrain/{run}/log.csv") as fh:
        rates = [float(row["tokens_per_s"]) for row in csv.DictReader(fh)][1:]  # the first window warms up
    total = statistics.median(rates)
    return {"processes": processes, "tokens_per_s": total, "tokens_per_s_per_process": total / processes,
            "windows": len(rates), "wall_s": wall}


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return f"{names[0]} x {len(names)}" if names else platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2], help="process counts to compare")
    parser.add_argument("--runs", nargs="+", default=["mlm", "exlm"], help="runs of params.yaml (their objectives)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", default="tiny", help="a key of params.yaml model_sizes")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=16, help="sequences per process and step")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    parser.add_argument("--out", type=Path, default=RESULTS / "ddp_cpu.json")
    args = parser.parse_args()

    load = os.getloadavg()[0]
    results = {run: [] for run in args.runs}
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as scratch:
        corpus = Path(scratch) / "corpus"
        synthetic_corpus(corpus, args.vocab, words=200_000)
        for run in args.runs:
            for n in args.processes:
                root = workspace(Path(scratch) / f"{run}-{n}", corpus, args, n)
                results[run].append(measure(root, run, n, args))
                print(run, results[run][-1], flush=True)
    for rows in results.values():
        base = rows[0]["tokens_per_s_per_process"]
        for row in rows:
            row["efficiency"] = row["tokens_per_s_per_process"] / base
    device = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name()
    report = {"device": device, "torch": torch.__version__, "settings": {k: str(v) for k, v in vars(args).items()},
              "load_before": load, "load_after": os.getloadavg()[0], "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
