# Generation perplexity (Look Around Eq. 2, Tab. 7) of every pretrained run a Look-Around
# table (table7) shows, under runs/perplexity/<run>/metrics.json.


rule perplexity:
    input:
        unpack(stage_input("perplexity")),
    output:
        **stage_output("perplexity"),
    log:
        STAGES["perplexity"].log,
    threads: stage_threads("perplexity")
    resources:
        **stage_resources("perplexity"),
    shell:
        stage_shell("perplexity")
