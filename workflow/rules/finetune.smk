# One fine-tuning job per (pretraining run, task, seed), then one summary per (run, task).


rule finetune:
    input:
        model=paths.PRETRAIN_MODEL,
        task=paths.TASK,
        card=paths.TASK_CARD,
        data_card=lambda w: paths.DOWNLOAD_CARD.format(dataset=PARAMS["tasks"][w.task]["dataset"]),
    output:
        metrics=paths.FINETUNE_METRICS,
        predictions=paths.FINETUNE_PREDICTIONS,
    log:
        paths.LOGS["finetune"],
    params:
        reads=lambda w: reads("finetune", f"{w.run}/{w.task}"),
    threads: lambda w: finetune_settings(PARAMS, w.task)["threads"]
    resources:
        mem_mb=RESOURCES["finetune"]["mem_mb"],
        runtime=lambda w: RESOURCES["finetune"]["runtime"] * grid_size(PARAMS, w.task),
        gpu=lambda w: uses_gpu(finetune_settings(PARAMS, w.task)["device"]),
    shell:
        "maskbench finetune --run {wildcards.run} --task {wildcards.task} --seed {wildcards.seed}"


rule aggregate:
    input:
        lambda w: [paths.FINETUNE_METRICS.format(run=w.run, task=w.task, seed=s) for s in task_seeds(PARAMS, w.task)],
    output:
        paths.FINETUNE_SUMMARY,
    log:
        paths.LOGS["aggregate"],
    params:
        reads=lambda w: reads("aggregate", f"{w.run}/{w.task}"),
    threads: 1
    resources:
        mem_mb=1000,
        gpu=0,
    shell:
        "maskbench aggregate --run {wildcards.run} --task {wildcards.task}"
