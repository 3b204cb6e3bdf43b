# Report tables: each is a target (`snakemake --cores all reports/table1.md`).


rule report:
    input:
        unpack(stage_input("report")),
    output:
        **stage_output("report"),
    log:
        STAGES["report"].log,
    params:
        reads=stage_reads("report"),
    threads: stage_threads("report")
    resources:
        **stage_resources("report"),
    shell:
        stage_shell("report")
