"""One workspace, two tools: after the Quick start's profile switch (`maskbench profile smoke`)
DVC's commands speak of the jobs the profile reports, and a job either tool built is built for
the other (each job's parameters are an input of both: maskbench.job_params)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from maskbench.config import read_params
from maskbench.dvc_yaml import render_dvc_yaml, reported_jobs
from tests.helpers import REPO, copy_build, copy_workflow, run

GIT = ["git", "-c", "user.name=maskbench-test", "-c", "user.email=test@maskbench.invalid"]


# What `dvc status` says of a built tree: its first stage, the guard, runs at every `dvc repro`
UP_TO_DATE = ["validate:", "always", "changed"]


def dvc(args: list[str], root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["dvc", *args], cwd=root, capture_output=True, text=True)


def stage_names(config: dict) -> set[str]:
    return {"validate", *(job.stage.job_name(job.wildcards) for job in reported_jobs(config))}


def test_profile_switch_writes_the_choice_beside_params_yaml_and_regenerates_dvc_yaml(tmp_path, monkeypatch, capsys):
    """`maskbench profile smoke`, in this process (the command's process and DVC on its result:
    the slow test below): params.yaml untouched, the choice in profile.yaml."""
    from maskbench.cli import main

    root = copy_workflow(tmp_path / "project")
    monkeypatch.chdir(root)
    before = (root / "params.yaml").read_text()
    main(["profile", "smoke"])
    assert (root / "params.yaml").read_text() == before
    assert (root / "profile.yaml").read_text() == "profile: smoke\n"
    after = (root / "profile.yaml").read_text()
    raw, config = read_params(root / "params.yaml")
    assert config["profile"] == "smoke"
    assert (root / "dvc.yaml").read_text() == render_dvc_yaml(config, root / "params.yaml")
    assert set(yaml.safe_load((root / "dvc.yaml").read_text())["stages"]) == stage_names(config)
    assert f"{len(reported_jobs(config))} jobs" in capsys.readouterr().out

    with pytest.raises(SystemExit) as wrong:
        main(["profile", "smoek"])
    assert "profiles.smoek" in str(wrong.value.code) and "smoke" in str(wrong.value.code)
    assert (root / "profile.yaml").read_text() == after  # nothing written


def validate_params(root: Path) -> list:
    """The `params:` of dvc.yaml's first stage: the file that decides the profile."""
    return yaml.safe_load((root / "dvc.yaml").read_text())["stages"]["validate"]["params"]


def test_params_yaml_decides_the_profile_until_one_is_chosen(tmp_path, monkeypatch, capsys):
    """A clone where no profile was chosen: an edit of params.yaml's `profile:` switches, and
    dvc.yaml's first stage reads the profile there. Once `maskbench profile` chose one, the
    choice wins and `maskbench validate` says the edit is overridden."""
    from maskbench.cli import main

    root = copy_workflow(tmp_path / "project")
    monkeypatch.chdir(root)
    assert not (root / "profile.yaml").exists()
    assert validate_params(root) == [{"params.yaml": ["profile"]}]
    params = root / "params.yaml"
    params.write_text(params.read_text().replace("\nprofile: tiny\n", "\nprofile: smoke\n", 1))
    assert read_params(params)[1]["profile"] == "smoke"
    main(["validate"])
    assert "overridden" not in capsys.readouterr().err

    main(["profile", "grid"])
    assert validate_params(root) == [{"profile.yaml": ["profile"]}]
    assert read_params(params)[1]["profile"] == "grid"
    capsys.readouterr()
    main(["validate"])
    err = capsys.readouterr().err
    assert "profile `grid` (chosen in profile.yaml); params.yaml's `profile: smoke` is overridden" in err, err


def test_quick_start_leaves_the_tree_clean(tmp_path, monkeypatch):
    """A clone (the files git tracks), `maskbench profile smoke`: `git status` shows no tracked
    change, and a table's footer names the commit without `-dirty`."""
    from maskbench.cli import main
    from maskbench.report.footer import provenance

    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    root = copy_workflow(tmp_path / "project")
    (root / "dvc.yaml").unlink()  # a clone has none: generated
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    run([*GIT, "init", "-q"], root)
    run([*GIT, "add", *(p for p in tracked if (root / p).exists())], root)
    run([*GIT, "commit", "-qm", "clone"], root)
    monkeypatch.chdir(root)
    main(["profile", "smoke"])
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                            text=True, check=True).stdout
    assert status == ""
    config = read_params(root / "params.yaml")[1]
    assert config["profile"] == "smoke" and not provenance(config, root)["git_commit"].endswith("-dirty")


@pytest.mark.slow
def test_plain_dvc_commands_on_a_tree_not_built_name_only_the_profiles_jobs(tmp_path):
    """After the Quick start's `maskbench profile smoke`, plain DVC commands on a tree not built
    yet name only smoke's jobs and do not fail."""
    root = copy_workflow(tmp_path / "project")
    run(["maskbench", "profile", "smoke"], root)
    run(["dvc", "init", "--no-scm", "-q"], root)
    status = dvc(["status"], root)
    assert status.returncode == 0, status.stderr
    named = set(re.findall(r"^(\S+):$", status.stdout, re.M))
    assert named and named <= stage_names(read_params(root / "params.yaml")[1])
    assert "lipophilicity" not in status.stdout  # a task of params.yaml that no smoke table reads


def table1_only(root: Path) -> None:
    """The smoke profile cut to table1 (every profile: `maskbench validate` checks them all), so
    that its `reports` holds the session's smoke build of table1 and an index."""
    params = yaml.safe_load((root / "params.yaml").read_text())
    for spec in [params, *params["profiles"].values()]:
        if "tables" in spec:
            spec["tables"] = {k: v for k, v in spec["tables"].items() if k == "table1"}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def edit(root: Path, *key: str, value) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    node = params
    for part in key[:-1]:
        node = node[part]
    node[key[-1]] = value
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def quick_start(smoke_table1, tmp_path_factory) -> Path:
    """The Quick start on a smoke profile of table1 alone (the session's smoke build of table1,
    cut to that table): switch, `snakemake --cores all reports`, then the documented handoff to
    DVC (docs/scaling-out.md)."""
    root = copy_build(smoke_table1, tmp_path_factory.mktemp("two-tools") / "project")
    table1_only(root)
    run(["maskbench", "profile", "smoke"], root)
    run(["snakemake", "--cores", "2", "reports"], root)
    shutil.copy(REPO / ".gitignore", root / ".gitignore")  # what a clone has
    run([*GIT, "init", "-q"], root)
    run(["dvc", "init", "-q"], root)
    run(["dvc", "repro", "validate"], root)
    run(["dvc", "commit", "-f"], root)  # plain: every stage of dvc.yaml was built
    run([*GIT, "add", "-A"], root)
    run([*GIT, "commit", "-qm", "smoke: reports"], root)  # `dvc exp show` compares against a commit
    return root


@pytest.mark.slow
def test_plain_dvc_commands_speak_of_the_smoke_build(quick_start):
    root = quick_start
    assert dvc(["status"], root).stdout.split() == UP_TO_DATE
    dry = dvc(["repro", "--dry"], root)
    assert dry.returncode == 0 and ran(dry.stdout) == ["validate"], dry.stdout + dry.stderr
    metrics = dvc(["metrics", "show"], root)
    assert metrics.returncode == 0 and "failed to load" not in metrics.stdout + metrics.stderr
    lines = metrics.stdout.splitlines()
    assert len(lines) == 2 and lines[1].startswith("reports/scorecard.json") and max(map(len, lines)) <= 120
    columns = re.split(r"\s{2,}", lines[0].strip())[1:]
    assert dict(zip(columns, lines[1].split()[1:]))["tables built"] == "1"
    scores = dvc(["metrics", "show", "runs/finetune/mlm/rotten_tomatoes/scores.json"], root).stdout.splitlines()
    assert scores[0].split() == ["Path", "test"] and float(scores[1].split()[1]) > 0  # a computed score


@pytest.mark.slow
def test_dvc_exp_show_of_what_changed_fits_120_columns(quick_start):
    """Plain `dvc exp show` has a column per key of params.yaml (DVC reads the whole default
    params file, declared or not); `--only-changed`, as docs/dvc.md gives it, shows the
    scorecard and the parameters that differ, in 120 columns."""
    def shown() -> str:
        out = subprocess.run(["dvc", "exp", "show", "--no-pager", "--only-changed"], cwd=quick_start,
                             capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
        assert out.returncode == 0, out.stderr
        lines = [line for line in out.stdout.splitlines() if line.strip()]
        assert max(map(len, lines)) <= 120, out.stdout
        return out.stdout

    assert "Experiment" in shown() and "datasets." not in shown()  # the commit itself: nothing differs
    original = (quick_start / "params.yaml").read_text()
    try:
        edit(quick_start, "finetune", "seeds", value=[1, 2])
        changed = shown()
        assert "finetune.seeds" in changed and "[1, 2, 3]" in changed  # the workspace's change, and the commit's
    finally:
        (quick_start / "params.yaml").write_text(original)


def documented_scorecard_view() -> list[str]:
    """docs/dvc.md's `dvc exp show ... --keep` line, as arguments (its comment left off)."""
    import shlex

    [line] = [line for line in (REPO / "docs/dvc.md").read_text().splitlines()
              if line.startswith("dvc exp show") and "--keep" in line]
    return shlex.split(line.split("   #")[0])


def test_the_documented_scorecard_view_keeps_every_scorecard_count_and_the_profile():
    """A verdict outcome added to OUTCOMES would otherwise vanish from the view unnoticed."""
    from maskbench.report.published import OUTCOMES

    keep = documented_scorecard_view()
    kept = re.fullmatch(r"\^\((.*)\)\$", keep[keep.index("--keep") + 1]).group(1).split("|")
    assert {"Experiment", "Created", "profile.yaml:profile", "tables built", *OUTCOMES} <= set(kept)


@pytest.mark.slow
def test_the_documented_scorecard_view_fits_120_columns(quick_start):
    """Plain `dvc exp show` has a column per dependency path and parameter (hundreds: docs/dvc.md);
    the documented `--drop '.*' --keep ...` view is the scorecard and the profile in 120 columns."""
    out = subprocess.run(documented_scorecard_view(), cwd=quick_start, capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "120"})
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert max(map(len, lines)) <= 120 and "…" not in out.stdout, out.stdout
    assert "tables built" in out.stdout and "smoke" in out.stdout and "datasets." not in out.stdout


def ran(out: str) -> list[str]:
    return sorted(re.findall(r"Running stage '([^']+)'", out))


def restored(out: str) -> list[str]:
    """The stages `dvc repro` rebuilt from its cache, without running their command (their deps
    are those of a build it holds)."""
    return sorted(re.findall(r"Stage '([^']+)' is cached - skipping run", out))


@pytest.mark.slow
def test_a_job_either_tool_built_is_built_for_the_other(quick_start):
    root = quick_start
    # DVC re-runs what a changed fine-tuning setting reaches; Snakemake then has nothing to do
    edit(root, "tasks", "rotten_tomatoes", "overrides", "lr", value=2e-4)
    assert ran(run(["dvc", "repro"], root)) == [
        "aggregate-mlm-rotten_tomatoes", "finetune-mlm-rotten_tomatoes-seed1", "finetune-mlm-rotten_tomatoes-seed2",
        "finetune-mlm-rotten_tomatoes-seed3", "index", "report-table1", "validate"]
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", "reports"], root)

    # Snakemake re-runs what a changed label reaches; DVC, handed the build, has nothing to do
    edit(root, "tasks", "rotten_tomatoes", "label", value="RT (renamed)")
    planned = run(["snakemake", "-n", "--cores", "1", "reports"], root)
    # (with the job's stale mark: its stamp says it was built with the old label; in either order)
    assert re.search(r"Updated input files: [^\n]*logs/params/aggregate-mlm-rotten_tomatoes.json", planned)
    run(["snakemake", "--cores", "2", "reports"], root)
    run(["dvc", "repro", "validate"], root)
    run(["dvc", "commit", "-f"], root)
    assert dvc(["status"], root).stdout.split() == UP_TO_DATE
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", "reports"], root)


def snakemake_jobs(planned: str) -> dict[str, str]:
    """`snakemake -n`'s jobs as DVC names them (`<stage>-<wildcards>`; a rule that is no stage,
    such as the `reports` target, by its name), each with its stage."""
    from maskbench.stages import STAGES

    jobs = {}
    for rule, block in re.findall(r"^(?:local)?rule (\S+):\n(.*?)(?=^\S|\Z)", planned, re.M | re.S):
        fields = dict(re.findall(r"^\s+(\w+): (.*)$", block, re.M))
        wildcards = dict(pair.split("=", 1) for pair in fields.get("wildcards", "").split(", ") if pair)
        jobs[STAGES[rule].job_name(wildcards) if rule in STAGES else rule] = rule
    return jobs


def code_records(root: Path) -> dict[str, str]:
    return {path.stem: path.read_text() for path in (root / "logs/code").glob("*.json")}


@pytest.mark.slow
def test_a_one_line_change_to_mlm_re_runs_the_same_jobs_in_both_tools(quick_start):
    """After a one-line change to objectives/mlm.py, `dvc status` names the jobs of the stages
    whose code changed, and `snakemake -n` (which rewrites those stages' code records,
    logs/code/<stage>.json, as it reads the Snakefile) plans the same jobs, and after them only
    the summaries, reports and index their outputs feed, which DVC, comparing what is on disk,
    names only once those outputs are rewritten."""
    source = quick_start / "src/maskbench/objectives/mlm.py"
    original, records = source.read_text(), code_records(quick_start)
    try:
        source.write_text(original + "# a one-line change\n")
        status = dvc(["status"], quick_start)
        assert status.returncode == 0, status.stderr
        by_dvc = set(re.findall(r"^(\S+):$", status.stdout, re.M)) - {"validate"}  # always run
        # the workspace's own code runs, as where maskbench is installed editable from the checkout
        # (the code records hash the package that runs; DVC hashes the checkout's src/)
        dry_run = subprocess.run(["snakemake", "-n", "--cores", "1", "reports"], cwd=quick_start, capture_output=True,
                                 text=True, env={**os.environ, "PYTHONPATH": str(quick_start / "src")})
        assert dry_run.returncode == 0, dry_run.stderr[-3000:]
        planned = snakemake_jobs(dry_run.stdout + dry_run.stderr)
        recoded = {stage for stage, record in code_records(quick_start).items() if records.get(stage) != record}
        assert "pretrain" in recoded and "report" not in recoded, recoded  # the record follows the code
        by_code = {job for job, stage in planned.items() if stage in recoded}
        assert by_code == by_dvc and {"pretrain-mlm", "finetune-mlm-rotten_tomatoes-seed1"} <= by_code, \
            (sorted(by_code), sorted(by_dvc))
        downstream = {stage for job, stage in planned.items() if job not in by_code}
        assert downstream == {"aggregate", "report", "index", "reports"}, sorted(downstream)
    finally:
        source.write_text(original)


LR = ("tasks", "rotten_tomatoes", "overrides", "lr")
# What a changed fine-tuning lr reaches, in either tool: table1 is the smoke profile's one table here
LR_JOBS = {"finetune-mlm-rotten_tomatoes-seed1", "finetune-mlm-rotten_tomatoes-seed2",
           "finetune-mlm-rotten_tomatoes-seed3", "aggregate-mlm-rotten_tomatoes", "report-table1", "index"}


def planned_jobs(root: Path, target: str = "reports") -> set[str]:
    """The jobs `snakemake -n` would run, by DVC's names (no target rule)."""
    from maskbench.stages import STAGES

    out = run(["snakemake", "-n", "--cores", "1", target], root)
    return {job for job, rule in snakemake_jobs(out).items() if rule in STAGES}


def reproduced(root: Path, fresh: Path) -> subprocess.CompletedProcess:
    """`maskbench compare` of the rebuilt table1 against the fresh build's."""
    return subprocess.run(["maskbench", "compare", "reports/table1.md", str(fresh / "reports/table1.md")], cwd=root,
                          capture_output=True, text=True)


@pytest.mark.slow
def test_reverting_an_edit_dvc_built_re_runs_exactly_its_jobs_under_snakemake(quick_start, tmp_path):
    """lr 5e-4 -> 4e-4, `dvc repro`, back to 5e-4: Snakemake's parameter record is back to the
    checksum it remembers, but the outputs DVC built read 4e-4: the six jobs re-run, nothing
    else, and table1 is the fresh build's again."""
    root = copy_build(quick_start, tmp_path / "project")
    original = (root / "params.yaml").read_text()
    edit(root, *LR, value=4e-4)
    assert set(ran(run(["dvc", "repro"], root))) == LR_JOBS | {"validate"}
    assert reproduced(root, quick_start).returncode != 0  # the edit shows
    (root / "params.yaml").write_text(original)
    assert planned_jobs(root) == LR_JOBS
    run(["snakemake", "--cores", "2", "reports"], root)
    assert reproduced(root, quick_start).returncode == 0, reproduced(root, quick_start).stdout
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", "reports"], root)


@pytest.mark.slow
def test_dvc_after_an_edit_snakemake_built_and_reverted_re_runs_exactly_its_jobs(quick_start, tmp_path):
    """lr 5e-4 -> 4e-4 built by Snakemake, back to 5e-4: the six jobs' deps are dvc.lock's again,
    so DVC restores dvc.lock's build of them from its cache rather than running them (with
    their stamps, outputs of the stage: maskbench.dvc_yaml), and Snakemake takes it as built."""
    root = copy_build(quick_start, tmp_path / "project")
    original = (root / "params.yaml").read_text()
    edit(root, *LR, value=4e-4)
    assert planned_jobs(root) == LR_JOBS
    run(["snakemake", "--cores", "2", "reports"], root)
    (root / "params.yaml").write_text(original)
    out = run(["dvc", "repro"], root)
    assert ran(out) == ["validate"] and set(restored(out)) == LR_JOBS, out
    assert reproduced(root, quick_start).returncode == 0, reproduced(root, quick_start).stdout
    assert planned_jobs(root) == set()  # and Snakemake takes DVC's build as its own
    # and each job's record holds what it ran with, as dvc.lock does: nothing more to do in either tool
    run(["snakemake", "-n", "--cores", "1", "reports"], root)  # (which rewrites the records it reads)
    assert dvc(["status"], root).stdout.split() == UP_TO_DATE


@pytest.mark.slow
def test_a_job_killed_during_forcerun_is_rebuilt_by_the_plain_target(quick_start, tmp_path):
    """kill -9 of Snakemake (and its job) while a forced fine-tuning job runs: the plain target
    plans that job again (its stamp says it did not finish), and rebuilds its outputs."""
    import signal
    import time

    root = copy_build(quick_start, tmp_path / "project")
    stamp = root / "logs/built/finetune-mlm-rotten_tomatoes-seed1.json"
    forced = subprocess.Popen(["snakemake", "--cores", "1", "reports/table1.md", "--forcerun", "finetune"], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not (stamp.exists() and '"building"' in stamp.read_text()):
            assert time.time() < deadline and forced.poll() is None, "the forced job never started"
            time.sleep(0.2)
        time.sleep(1)
    finally:
        os.killpg(forced.pid, signal.SIGKILL)
        forced.wait()
    assert "finetune-mlm-rotten_tomatoes-seed1" in planned_jobs(root, "reports/table1.md")
    run(["snakemake", "--unlock"], root)  # Snakemake's own lock, left by the kill
    run(["snakemake", "--cores", "2", "reports/table1.md"], root)
    assert (root / "runs/finetune/mlm/rotten_tomatoes/seed1/metrics.json").exists()
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", "reports/table1.md"], root)


@pytest.mark.slow
def test_dvc_repro_during_snakemake_is_refused_naming_it(quick_start, tmp_path):
    """While Snakemake re-runs fine-tuning, `dvc repro`'s first stage command is refused, naming
    Snakemake and how to wait; Snakemake's build is unharmed and its table is the fresh build's."""
    import time

    root = copy_build(quick_start, tmp_path / "project")
    lock = root / "logs/workspace.lock"
    lock.unlink(missing_ok=True)
    snakemake = subprocess.Popen(["snakemake", "--cores", "1", "reports/table1.md", "--forcerun", "finetune"],
                                 cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not (lock.exists() and '"snakemake"' in lock.read_text()):
        assert time.time() < deadline and snakemake.poll() is None, "Snakemake never started its jobs"
        time.sleep(0.2)
    refused = dvc(["repro"], root)
    assert snakemake.wait() == 0, snakemake.stderr.read()[-3000:]
    assert refused.returncode != 0
    assert f"snakemake is running in this workspace (pid {snakemake.pid}" in refused.stdout + refused.stderr
    assert f"while kill -0 {snakemake.pid}" in refused.stdout + refused.stderr
    assert ran(refused.stdout) == ["validate"]  # its guard, which runs first: DVC removed nothing
    assert reproduced(root, quick_start).returncode == 0, reproduced(root, quick_start).stdout
