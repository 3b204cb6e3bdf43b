# One pretraining job per named run; resumes from runs/pretrain/<run>/checkpoint/ if present.
# `snakemake --cores all pretrained` pretrains every run in params.yaml.


def _pretrain_settings(w):
    return run_settings(PARAMS, w.run)


def _modality(w):
    return PARAMS["runs"][w.run]["modality"]


rule pretrain:
    input:
        tokens=lambda w: paths.TOKENS.format(modality=_modality(w)),
        tokenizer=lambda w: paths.TOKENIZER.format(modality=_modality(w)),
        cards=lambda w: [paths.DOWNLOAD_CARD.format(dataset=d) for d in corpus_datasets(PARAMS, _modality(w))],
    output:
        model=directory(paths.PRETRAIN_MODEL),
        metrics=paths.PRETRAIN_METRICS,
        log_csv=paths.PRETRAIN_LOG,
    log:
        paths.LOGS["pretrain"],
    params:
        reads=lambda w: reads("pretrain", w.run),
    threads: lambda w: _pretrain_settings(w)["threads"]
    resources:
        mem_mb=RESOURCES["pretrain"]["mem_mb"],
        runtime=RESOURCES["pretrain"]["runtime"],
        gpu=lambda w: uses_gpu(_pretrain_settings(w)["device"]),
    shell:
        "maskbench pretrain --run {wildcards.run}"


rule pretrained:
    input:
        pretrained_models(),
