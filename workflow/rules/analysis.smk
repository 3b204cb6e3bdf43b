# One analysis job per pretrained run (docs/analyses.md): corrupted semantics, prediction
# entropy, effective rank and ExLM's case study, under runs/analysis/<run>/.
# `snakemake --cores all analysed` analyses every run in params.yaml, each pretraining seed
# (`runs/analysis/mlm-pseed1/`): the tables read seed 0, the others measure the spread of an
# analysis measure between seeds (noise.yaml `measures`, docs/pretraining-seeds.md).


rule analyse:
    input:
        unpack(stage_input("analyse")),
    output:
        **stage_output("analyse"),
    log:
        STAGES["analyse"].log,
    threads: stage_threads("analyse")
    resources:
        **stage_resources("analyse"),
    shell:
        stage_shell("analyse")


rule analysed:
    input:
        targets("analyse", "corruption"),
