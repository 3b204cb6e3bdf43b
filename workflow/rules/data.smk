# download → tokenizer → tokenize (pretraining corpora), download → task (downstream data).


rule download:
    output:
        raw=directory(paths.RAW),
        card=paths.DOWNLOAD_CARD,
    log:
        paths.LOGS["download"],
    params:
        source=lambda w: PARAMS["datasets"][w.dataset],
    threads: 1
    resources:
        mem_mb=2000,
        gpu=0,
    shell:
        "maskbench download --dataset {wildcards.dataset}"


rule tokenizer:
    input:
        raw=lambda w: corpus_raw(w.modality),
    output:
        directory(paths.TOKENIZER),
    log:
        paths.LOGS["tokenizer"],
    params:
        spec=lambda w: [PARAMS["corpora"][w.modality], PARAMS["tokenizer"][w.modality]],
    threads: 1
    resources:
        mem_mb=8000,
        gpu=0,
    shell:
        "maskbench tokenizer --modality {wildcards.modality}"


rule tokenize:
    input:
        raw=lambda w: corpus_raw(w.modality),
        tokenizer=paths.TOKENIZER,
    output:
        tokens=directory(paths.TOKENS),
        card=paths.TOKENS_CARD,
    log:
        paths.LOGS["tokenize"],
    params:
        corpus=lambda w: PARAMS["corpora"][w.modality],
    threads: 1
    resources:
        mem_mb=8000,
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
        spec=lambda w: PARAMS["tasks"][w.task],
    threads: 1
    resources:
        mem_mb=4000,
        gpu=0,
    shell:
        "maskbench task --task {wildcards.task}"
