# download → tokenizer → tokenize (pretraining corpora), download → task (downstream data).
# `snakemake --cores all data` prepares every corpus and task of params.yaml.


rule data:
    input:
        targets("tokenize", "card"),
        targets("task", "card"),


rule download:
    input:
        unpack(stage_input("download")),
    output:
        **stage_output("download"),
    log:
        STAGES["download"].log,
    threads: stage_threads("download")
    resources:
        **stage_resources("download"),
    shell:
        stage_shell("download")


rule tokenizer:
    input:
        unpack(stage_input("tokenizer")),
    output:
        **stage_output("tokenizer"),
    log:
        STAGES["tokenizer"].log,
    threads: stage_threads("tokenizer")
    resources:
        **stage_resources("tokenizer"),
    shell:
        stage_shell("tokenizer")


rule tokenize:
    input:
        unpack(stage_input("tokenize")),
    output:
        **stage_output("tokenize"),
    log:
        STAGES["tokenize"].log,
    threads: stage_threads("tokenize")
    resources:
        **stage_resources("tokenize"),
    shell:
        stage_shell("tokenize")


rule task:
    input:
        unpack(stage_input("task")),
    output:
        **stage_output("task"),
    log:
        STAGES["task"].log,
    threads: stage_threads("task")
    resources:
        **stage_resources("task"),
    shell:
        stage_shell("task")
