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


# The fine-tuning jobs that keep their encoder besides (an analysis reads it: `paths.KEPT`), one
# rule each on the job's own files, which Snakemake prefers to the rule above for them (it has no
# wildcards): a rule's outputs are the same for all its jobs, and every job keeping one is too many.
for kept in STAGES["finetune"].keeping_jobs(PARAMS):

    rule:
        name:
            STAGES["finetune"].job_name(kept).replace("-", "_")
        input:
            **job_input("finetune", kept),
        output:
            **job_output("finetune", kept),
        log:
            STAGES["finetune"].log.format(**kept),
        threads: STAGES["finetune"].resources(PARAMS, kept)["threads"]
        resources:
            **job_resources("finetune", kept),
        shell:
            STAGES["finetune"].command(kept) + " --log {log}"


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
