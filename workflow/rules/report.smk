# Report tables: each is a target (`snakemake --cores all reports/table1.md`); `reports` builds
# every table of the active profile and the index, and `snakemake --report reports/report.html built`
# gathers the tables built so far (and their figures, and an index made from their cards) into
# one browsable HTML file (docs/report.md; the items: `report_items` in common.smk).


rule report:
    """
    Renders one table of the papers (its markdown, the same as HTML, its figures) from its runs'
    fine-tuning, controls and analyses, with a verdict on each claim of the papers its kind
    decides, by the noise rule the table states.
    """
    input:
        unpack(stage_input("report")),
    output:
        **stage_output("report"),
    log:
        STAGES["report"].log,
    threads: stage_threads("report")
    resources:
        **stage_resources("report"),
    shell:
        stage_shell("report")


rule index:
    """
    Lists every table of the profile and its figures with the profile, git commit and params
    hash each came from, and scores the papers' claims with the verdicts the tables wrote.
    """
    input:
        unpack(stage_input("index")),
    output:
        **stage_output("index"),
    log:
        STAGES["index"].log,
    threads: stage_threads("index")
    resources:
        **stage_resources("index"),
    shell:
        stage_shell("index")


rule reports:
    input:
        targets("index", "index"),
        report_items,


rule built:
    """
    The report's items alone, for `snakemake --report FILE.html built`: the report
    then describes only the jobs behind the tables built so far, where another target (`all` by
    default) names every job of params.yaml and the report warns of each job never run.
    Builds nothing.
    """
    input:
        report_items,
