"""What computed a result: the arithmetic record of a process (maskbench.provenance.arithmetic)
and the sentence a table's footer makes of its jobs' records (maskbench.report.footer)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from maskbench import paths
from maskbench.config import task_seeds
from maskbench.provenance import arithmetic, cpu_model
from maskbench.report.footer import arithmetic_sentence, generated_line


def test_the_record_names_the_cpu_path_and_every_library_build():
    record = arithmetic("cpu")
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["torch"] == torch.__version__ and record["threads"] == torch.get_num_threads()
    if torch.backends.mkl.is_available():
        assert record["mkl"][:4].isdigit()  # e.g. 2024.2
    if torch.backends.mkldnn.is_available():
        assert record["onednn"][0].isdigit()  # e.g. 3.12.0
    assert "cpu_arithmetic" in record and "gpu" not in record


def test_the_cpu_model_is_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t"
                    ": avx2\n")
    assert cpu_model(info) == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_model(tmp_path / "absent")  # elsewhere, what `platform` knows


RECORD = {"cpu": "AMD EPYC", "cpu_capability": "AVX2", "torch": "2.13.0+cpu", "mkl": "2024.2", "onednn": "3.12.0",
          "threads": 1, "cpu_arithmetic": "reproducible: ATEN_CPU_CAPABILITY=avx2"}


def write_metrics(root: Path, template: str, record: dict | None, **where) -> None:
    path = root / template.format(**where)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"test": 0.5, **({"arithmetic": record} if record else {})}))


def table_config(config: dict) -> dict:
    return {**config, "tables": {**config["tables"], "t": {"runs": ["mlm"], "tasks": ["rotten_tomatoes"]}}}


def test_a_table_whose_jobs_agree_names_their_arithmetic_once(config, tmp_path):
    config = table_config(config)
    assert "no job" in arithmetic_sentence(config, "t", tmp_path)
    write_metrics(tmp_path, paths.PRETRAIN_METRICS, RECORD, run="mlm")
    for seed in task_seeds(config, "rotten_tomatoes")[:2]:
        write_metrics(tmp_path, paths.FINETUNE_METRICS, RECORD, run="mlm", task="rotten_tomatoes", seed=seed)
    said = arithmetic_sentence(config, "t", tmp_path)
    assert said == ("Arithmetic of its runs' 3 job records: AMD EPYC (ATen AVX2), torch 2.13.0+cpu, MKL 2024.2, "
                    "oneDNN 3.12.0, 1 thread(s), cpu_arithmetic reproducible: ATEN_CPU_CAPABILITY=avx2.")
    assert generated_line(config, tmp_path, "t").endswith(said)
    assert "Arithmetic" not in generated_line(config, tmp_path)  # the index has no jobs of its own


def test_a_table_whose_jobs_differ_says_how_each_computed(config, tmp_path):
    config = table_config(config)
    write_metrics(tmp_path, paths.PRETRAIN_METRICS, {**RECORD, "cpu_capability": "AVX512"}, run="mlm")
    write_metrics(tmp_path, paths.FINETUNE_METRICS, {**RECORD, "gpu": "NVIDIA H100", "cuda": "12.8", "cudnn": 91000},
                  run="mlm", task="rotten_tomatoes", seed=task_seeds(config, "rotten_tomatoes")[0])
    write_metrics(tmp_path, paths.FINETUNE_METRICS, None, run="mlm", task="rotten_tomatoes",
                  seed=task_seeds(config, "rotten_tomatoes")[1])
    said = arithmetic_sentence(config, "t", tmp_path)
    assert said.startswith("Arithmetic differs between its runs' 3 job records: 1 × AMD EPYC (ATen AVX512)")
    assert "GPU NVIDIA H100 (CUDA 12.8, cuDNN 91000)" in said
    assert said.endswith("1 record(s) made before maskbench recorded it do not say.")


def test_probe_and_analysis_records_count_in_the_footer(config, tmp_path):
    """The footer counts every record of the table's runs' jobs: a table whose probe or analyses
    computed on another CPU path says so, not only its pretraining and fine-tuning."""
    from maskbench.stages import report_inputs

    config = {**config, "tables": {**config["tables"], "t": {**config["tables"]["table2"], "runs": ["mlm"]}}}
    inputs = report_inputs(config, {"table": "t"})
    assert inputs["analyses"], "table2's kind reads analyses"
    for path in inputs["pretrain_metrics"] + inputs["finetune_metrics"] + inputs["probes"]:
        write_metrics(tmp_path, path, RECORD)
    for path in inputs["analyses"]:
        write_metrics(tmp_path, path, {**RECORD, "cpu_capability": "AVX512"})
    # a measure only another kind reads (table6's ranks of the same run) is not this table's job
    write_metrics(tmp_path, paths.ANALYSIS_RANK.format(run="mlm"), {**RECORD, "cpu_capability": "SSE"})
    said = arithmetic_sentence(config, "t", tmp_path)
    total = sum(len(inputs[k]) for k in ("pretrain_metrics", "finetune_metrics", "probes", "analyses"))
    assert said.startswith(f"Arithmetic differs between its runs' {total} job records:")
    assert f"{len(inputs['analyses'])} × AMD EPYC (ATen AVX512)" in said and "SSE" not in said
