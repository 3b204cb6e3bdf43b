# download → tokenizer → tokenize (pretraining corpora), download → task (downstream data).
# `snakemake --cores all data` prepares every corpus and task of params.yaml.


rule data:
    input:
        data_products(),


rule download:
    output:
        raw=directory(paths.RAW),
        card=paths.DOWNLOAD_CARD,
    log:
        paths.LOGS["download"],
    params:
        reads=lambda w: reads("download", w.dataset),
    threads: 1
    resources:
        mem_mb=RESOURCES["download"]["mem_mb"],
        runtime=RESOURCES["download"]["runtime"],
        gpu=0,
    shell:
        "maskbench download --dataset {wildcards.dataset}"


rule tokenizer:
    input:
        raw=lambda w: corpus_raws(w.modality),
    output:
        directory(paths.TOKENIZER),
    log:
        paths.LOGS["tokenizer"],
    params:
        reads=lambda w: reads("tokenizer", w.modality),
    threads: 1
    resources:
        mem_mb=RESOURCES["tokenizer"]["mem_mb"],
        runtime=RESOURCES["tokenizer"]["runtime"],
        gpu=0,
    shell:
        "maskbench tokenizer --modality {wildcards.modality}"


rule tokenize:
    input:
        raw=lambda w: corpus_raws(w.modality),
        tokenizer=paths.TOKENIZER,
    output:
        tokens=directory(paths.TOKENS),
        card=paths.TOKENS_CARD,
    log:
        paths.LOGS["tokenize"],
    params:
        reads=lambda w: reads("tokenize", w.modality),
    threads: 1
    resources:
        mem_mb=RESOURCES["tokenize"]["mem_mb"],
        runtime=RESOURCES["tokenize"]["runtime"],
        gpu=0,
    shell:
        "maskbench tokenize --modality {wildcards.modality}"


rule task:
    input:
        raw=lambda w: paths.RAW.format(dataset=PARAMS["tasks"][w.task]["dataset"]),
    output:
        split=directory(paths.TASK),
        card=paths.TASK_CARD,
    log:
        paths.LOGS["task"],
    params:
        reads=lambda w: reads("task", w.task),
    threads: 1
    resources:
        mem_mb=RESOURCES["task"]["mem_mb"],
        runtime=RESOURCES["task"]["runtime"],
        gpu=0,
    shell:
        "maskbench task --task {wildcards.task}"
