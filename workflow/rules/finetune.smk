# One fine-tuning job per (pretraining run, task, seed), then one summary per (run, task).


rule finetune:
    input:
        unpack(stage_input("finetune")),
    output:
        **stage_output("finetune"),
    log:
        STAGES["finetune"].log,
    threads: stage_threads("finetune")
    resources:
        **stage_resources("finetune"),
    shell:
        stage_shell("finetune")


rule aggregate:
    input:
        unpack(stage_input("aggregate")),
    output:
        **stage_output("aggregate"),
    log:
        STAGES["aggregate"].log,
    threads: stage_threads("aggregate")
    resources:
        **stage_resources("aggregate"),
    shell:
        stage_shell("aggregate")
