# Report tables: each is a target (`snakemake --cores all reports/table1.md`); `reports` builds
# every table of the active profile and the index, and `snakemake --report reports/report.html`
# then gathers them (and the figures) into one browsable HTML file (docs/report.md).


rule report:
    """
    Renders one table of the papers (its markdown, the same as HTML, its figures) from its runs'
    fine-tuning, controls and analyses, with a verdict on each claim of the papers its kind
    decides, by the noise rule the table states.
    """
    input:
        unpack(stage_input("report")),
    output:
        **stage_output("report", {
            "html": {"caption": "../report/table.rst", "category": "Tables", "labels": {"table": "{table}"}},
            "figures": {"patterns": ["{name}.png"], "caption": "../report/figure.rst", "category": "Figures",
                        "subcategory": "{table}", "labels": {"table": "{table}", "figure": "{name}"}},
        }),
    log:
        STAGES["report"].log,
    params:
        reads=stage_reads("report"),
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
        **stage_output("index", {"html": {"caption": "../report/index.rst", "category": "Index",
                                          "labels": {"page": "index"}}}),
    log:
        STAGES["index"].log,
    params:
        reads=stage_reads("index"),
    threads: stage_threads("index")
    resources:
        **stage_resources("index"),
    shell:
        stage_shell("index")


rule reports:
    input:
        targets("index", "index"),
