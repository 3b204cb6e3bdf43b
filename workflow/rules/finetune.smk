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
# The command is a param, evaluated here: Snakemake evaluates a `shell:` expression when the job
# runs, by which time `kept` is the loop's last job (snakemake#2832: every rule ran the last one's).
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
        params:
            command=STAGES["finetune"].command(kept),
        shell:
            "{params.command} --log {log}"


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
