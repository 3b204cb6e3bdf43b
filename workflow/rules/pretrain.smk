# One pretraining job per named run; resumes from runs/pretrain/<run>/checkpoint/ if present.
# `snakemake --cores all pretrained` pretrains every run in params.yaml.


rule pretrain:
    input:
        unpack(stage_input("pretrain")),
    output:
        **stage_output("pretrain"),
    log:
        STAGES["pretrain"].log,
    threads: stage_threads("pretrain")
    resources:
        **stage_resources("pretrain"),
    shell:
        stage_shell("pretrain")


rule pretrained:
    input:
        targets("pretrain", "model"),
