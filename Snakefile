# maskbench: regenerate the [MASK]-token experiments from params.yaml.
#   snakemake --cores all reports/table1.md          # one table
#   snakemake --cores all reports                     # every table of the profile and reports/index.md
#   snakemake --report reports/report.html built      # the tables built so far, their figures and the index, as one HTML file
#   snakemake --cores all                             # every table and the index, and all data in params.yaml
#   snakemake --cores all data                        # every corpus and task, prepared (data/cards/*)
#   snakemake --workflow-profile workflow/profiles/slurm reports/table1.md   # on a cluster
# params.yaml is read and validated once, against workflow/schemas/params.schema.yaml, in
# common.smk, with the CLI's messages (not through `configfile:`, whose errors dump the schema).
from snakemake.utils import min_version

min_version("8.0")

report: "workflow/report/workflow.rst"

include: "workflow/rules/common.smk"


rule all:
    input:
        targets("report", "report"),
        targets("index", "index"),
        targets("tokenize", "card"),
        targets("task", "card"),
        targets("pretrain", "model"),
        targets("analyse", "corruption"),
        report_items,  # what `snakemake --report` shows: the pages built so far


include: "workflow/rules/data.smk"
include: "workflow/rules/pretrain.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/controls.smk"
include: "workflow/rules/analysis.smk"
include: "workflow/rules/perplexity.smk"
include: "workflow/rules/report.smk"


onstart:
    hold_workspace()  # one build at a time: refused while DVC or another build runs here (maskbench.workspace)
    shell("maskbench tracking-init")
