# brorl-repro: the BroRL reproduction pipeline.
#   snakemake --cores all                          tiny profile (config/config.yaml)
#   snakemake --cores all --configfile config/paper.yaml   paper profile
# Rules live in workflow/rules/*.smk and each calls one `brorl` CLI command; they read one plan of the run
# (common.smk's PLAN: brorl.pipeline.Plan) and their own names.

from snakemake.utils import min_version

min_version("9.27")


# The default profile applies only when no --configfile is given: a --configfile (paper, study, ci) is the
# whole config of the run, never merged into the tiny defaults. --config KEY=VALUE overrides either.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/theory.smk"
include: "workflow/rules/fetch.smk"
include: "workflow/rules/rg_difficulty.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/evaluation.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/study.smk"
include: "workflow/rules/tracking.smk"


rule all:
    input:
        PLAN.targets,  # every stage's final outputs (brorl.pipeline.Plan, built in common.smk)
    default_target: True


# Every rule's command tags its MLflow run with the rule's own name (`--rule {params.rule}`): set here, once.
for _rule in workflow.rules:
    _rule.set_params(rule=_rule.name)
