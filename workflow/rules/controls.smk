# Controls (docs/controls.md): one baseline job per task a table shows, one probe job per
# (run, whole-sequence task) cell.


rule baseline:
    input:
        unpack(stage_input("baseline")),
    output:
        **stage_output("baseline"),
    log:
        STAGES["baseline"].log,
    threads: stage_threads("baseline")
    resources:
        **stage_resources("baseline"),
    shell:
        stage_shell("baseline")


rule probe:
    input:
        unpack(stage_input("probe")),
    output:
        **stage_output("probe"),
    log:
        STAGES["probe"].log,
    threads: stage_threads("probe")
    resources:
        **stage_resources("probe"),
    shell:
        stage_shell("probe")
