"""Where every stage reads and writes, relative to the repository root.

The stage table (maskbench.stages) builds every stage's inputs from these patterns and takes
its outputs from `OUTPUTS`, and Snakemake, dvc.yaml and the CLI take them from there, so the
three never disagree.
Paths name datasets, runs, tasks and seeds, never hyperparameter values: `dvc exp run -S`
changes what a file holds, not where it is.
"""

RAW = "data/raw/{dataset}"
DOWNLOAD_CARD = "data/cards/download-{dataset}.json"
TOKENIZER = "data/tokenizer/{modality}"
TOKENS = "data/tokens/{modality}"
TOKENS_CARD = "data/cards/tokens-{modality}.json"
TASK = "data/tasks/{task}"
TASK_CARD = "data/cards/task-{task}.json"
PRETRAIN_MODEL = "runs/pretrain/{run}/model"
PRETRAIN_METRICS = "runs/pretrain/{run}/metrics.json"
PRETRAIN_SCORES = "runs/pretrain/{run}/scores.json"  # DVC's metrics: the final training and validation loss
PRETRAIN_LOG = "runs/pretrain/{run}/log.csv"  # training loss, lr, grad norm, throughput every log_every steps
PRETRAIN_VALID = "runs/pretrain/{run}/valid.csv"  # validation loss every eval_every steps and at the last
PRETRAIN_OBJECTIVE = "runs/pretrain/{run}/objective.safetensors"  # the objective's weights but the encoder's (analyses)
PRETRAIN_CHECKPOINT = "runs/pretrain/{run}/checkpoint"  # not an output: kept for resuming, deleted when done
FINETUNE_METRICS = "runs/finetune/{run}/{task}/seed{seed}/metrics.json"
FINETUNE_SCORES = "runs/finetune/{run}/{task}/seed{seed}/scores.json"  # DVC's metrics: the task metric on dev, test
FINETUNE_PREDICTIONS = "runs/finetune/{run}/{task}/seed{seed}/predictions.jsonl"
# not an output: kept for resuming, deleted when done
FINETUNE_CHECKPOINT = "runs/finetune/{run}/{task}/seed{seed}/checkpoint"
# the fine-tuned encoder, kept by the one job the analyses read it from (KEPT)
FINETUNE_ENCODER = "runs/finetune/{run}/{task}/seed{seed}/encoder"
FINETUNE_SUMMARY = "runs/finetune/{run}/{task}/summary.json"
FINETUNE_SUMMARY_SCORES = "runs/finetune/{run}/{task}/scores.json"  # DVC's metrics: the summary's, on its split
BASELINE_METRICS = "runs/baseline/{task}/metrics.json"  # controls: trivial and ECFP baselines of a task
BASELINE_PREDICTIONS = "runs/baseline/{task}/predictions.jsonl"
PROBE_METRICS = "runs/probe/{run}/{task}/metrics.json"  # controls: linear probes of a frozen encoder
PROBE_PREDICTIONS = "runs/probe/{run}/{task}/predictions.jsonl"
ANALYSIS_CORRUPTION = "runs/analysis/{run}/corruption.json"  # docs/analyses.md
ANALYSIS_ENTROPY = "runs/analysis/{run}/entropy.json"
ANALYSIS_RANK = "runs/analysis/{run}/effective_rank.json"
ANALYSIS_CASE_STUDY = "runs/analysis/{run}/case_study.json"
ANALYSIS_ALIGNMENT = "runs/analysis/{run}/alignment.json"
GENERATION_PERPLEXITY = "runs/perplexity/{run}/metrics.json"  # Look Around Eq. 2 (table7)
# The per-run measure files each kind of table reads for its pretrained runs: the report job
# waits for them (maskbench.stages) and its footer counts their arithmetic records.
TABLE_ANALYSES = {"objectives": (), "ablations": (), "look_around": (GENERATION_PERPLEXITY,),
                  "repeated_mlm_grid": (ANALYSIS_CORRUPTION, ANALYSIS_ENTROPY),
                  "exlm_grid": (ANALYSIS_ENTROPY, ANALYSIS_CASE_STUDY, ANALYSIS_ALIGNMENT),
                  "effective_rank": (ANALYSIS_RANK,)}
REPORT = "reports/{table}.md"
REPORT_HTML = "reports/{table}.html"  # the same table as HTML, its figures inlined: an item of `snakemake --report`
REPORT_CARD = "reports/{table}.json"  # its provenance, figures and claim verdicts, read by the index
FIGURES = "reports/figures/{table}"  # the table's PNGs (reports/figures/table2/score.png, ...), linked from it
INDEX = "reports/index.md"  # every table and figure with its provenance, and the claims' scorecard
INDEX_HTML = "reports/index.html"  # the index as a web page beside the tables' pages, which it links
SCORECARD = "reports/scorecard.json"  # the scorecard's counts (claims per verdict, tables built): DVC's metrics
REFERENCE = "reports/reference/{name}"  # committed reference pages (tableN-<profile>.md, <profile>-3seeds/tableN.md)
REPORT_INDEX_PAGE = ".snakemake/maskbench/index.html"  # the Index of `snakemake --report`, made from the cards then
SCHEMA = "workflow/schemas/params.schema.yaml"
PARAMS_STAMP = "logs/params-valid.json"  # dvc.yaml: written by the validate stage, read by every other
PARAMS_RECORD = "logs/params/{job}.json"  # the params.yaml values one job reads (maskbench.job_params), an input of it
# the hash of the code a stage kind runs (maskbench.job_params), Snakemake's input
CODE_RECORD = "logs/code/{stage}.json"
# what one job's outputs were built from, written by its command whichever tool ran it, and the
# Snakefile's verdict on it, an input of the job (maskbench.built)
BUILT_STAMP = "logs/built/{job}.json"
STALE_MARK = "logs/stale/{job}.json"
WORKSPACE_LOCK = "logs/workspace.lock"  # held by the build running here, named inside (maskbench.workspace)
PUBLISHED = "src/maskbench/report/published.yaml"  # read by the report stage
LOGS = {
    "download": "logs/download/{dataset}.log",
    "tokenizer": "logs/tokenizer/{modality}.log",
    "tokenize": "logs/tokenize/{modality}.log",
    "task": "logs/task/{task}.log",
    "pretrain": "logs/pretrain/{run}.log",
    "finetune": "logs/finetune/{run}-{task}-seed{seed}.log",
    "aggregate": "logs/aggregate/{run}-{task}.log",
    "baseline": "logs/baseline/{task}.log",
    "probe": "logs/probe/{run}-{task}.log",
    "analyse": "logs/analyse/{run}.log",
    "perplexity": "logs/perplexity/{run}.log",
    "report": "logs/report/{table}.log",
    "index": "logs/index.log",
}
# What each stage writes, by output name (the stage table's `outputs`, in its order), and which
# of those outputs are directories. Kept beside the patterns so that an error about a damaged
# file names the job that rebuilds it (`maskbench.io.way_out`) without the modules that read
# files importing the stage table.
OUTPUTS = {
    "download": {"raw": RAW, "card": DOWNLOAD_CARD},
    "tokenizer": {"tokenizer": TOKENIZER},
    "tokenize": {"tokens": TOKENS, "card": TOKENS_CARD},
    "task": {"split": TASK, "card": TASK_CARD},
    "pretrain": {"model": PRETRAIN_MODEL, "objective": PRETRAIN_OBJECTIVE, "metrics": PRETRAIN_METRICS,
                 "scores": PRETRAIN_SCORES, "log_csv": PRETRAIN_LOG, "valid_csv": PRETRAIN_VALID},
    "finetune": {"metrics": FINETUNE_METRICS, "scores": FINETUNE_SCORES, "predictions": FINETUNE_PREDICTIONS},
    "aggregate": {"summary": FINETUNE_SUMMARY, "scores": FINETUNE_SUMMARY_SCORES},
    "baseline": {"metrics": BASELINE_METRICS, "predictions": BASELINE_PREDICTIONS},
    "probe": {"metrics": PROBE_METRICS, "predictions": PROBE_PREDICTIONS},
    "analyse": {"corruption": ANALYSIS_CORRUPTION, "entropy": ANALYSIS_ENTROPY, "rank": ANALYSIS_RANK,
                "case_study": ANALYSIS_CASE_STUDY, "alignment": ANALYSIS_ALIGNMENT},
    "perplexity": {"metrics": GENERATION_PERPLEXITY},
    "report": {"report": REPORT, "html": REPORT_HTML, "card": REPORT_CARD, "figures": FIGURES},
    "index": {"index": INDEX, "html": INDEX_HTML, "scorecard": SCORECARD},
}
# What only some jobs of a stage write besides (the stage table's `keeps` says which): the
# fine-tuned encoder whose rank the analysis of its run measures (MAE-LM Fig. 5b), kept by that
# run's fine-tuning on the analysis task with the task's first seed, not by every fine-tuning.
KEPT = {"finetune": {"encoder": FINETUNE_ENCODER}}
DIRECTORIES = (RAW, TOKENIZER, TOKENS, TASK, PRETRAIN_MODEL, FINETUNE_ENCODER, FIGURES)
PIP_CACHE = "data/cache/pypi"
