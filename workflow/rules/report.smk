# Report tables: each is a target (`snakemake --cores all reports/table1.md`).


rule report:
    input:
        summaries=lambda w: [paths.FINETUNE_SUMMARY.format(run=r, task=t) for r, t in table_cells(PARAMS, w.table)],
        published=paths.PUBLISHED,  # the papers' numbers and claims set beside ours
    output:
        paths.REPORT,
    log:
        paths.LOGS["report"],
    params:
        reads=lambda w: reads("report", w.table),
    threads: 1
    resources:
        mem_mb=1000,
        gpu=0,
    shell:
        "maskbench report --table {wildcards.table}"
