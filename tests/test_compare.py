"""`maskbench compare TABLE REFERENCE` (maskbench.report.compare) on small synthetic pages: the
footers it reads (the same arithmetic demands identical cells, another is named in the first line),
the verdict, its exit code, and where each cell's noise comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from maskbench.cli import main
from maskbench.report import compare as compare_module

HEADER = ("| run | task A — accuracy, mean ± std of 3 seeds | pretraining: nats below the unigram loss |\n"
          "|---|---|---|\n")
AVX2 = ("AMD EPYC (ATen AVX2), torch 2.13.0+cpu, MKL 2024.2, oneDNN 3.12.0, 1 thread(s), cpu_arithmetic native: each "
        "library takes the fastest path of this CPU")
AVX512 = AVX2.replace("ATen AVX2", "ATen AVX512")


def page(path: Path, rows: str, profile: str = "tiny", arithmetic: str | None = AVX2, commit: str = "abc") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    said = f" Arithmetic of its runs' 47 job records: {arithmetic}." if arithmetic else ""
    path.write_text(f"# table1: test\n\nProfile `{profile}`; scores in %.\n\n{HEADER}{rows}\n"
                    f"Generated 2026-11-27 08:00 UTC from git commit `{commit}`, params hash `f00`.{said}\n")
    return path


def compare(capsys, *argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        main(["compare", *map(str, argv)])
    return stop.value.code, capsys.readouterr().out


REFERENCE = ("| mlm | 75.8 ± 7.5 (probe 54.2) | 1.29 |\n| baseline: majority | 49.5 | — |\n"
             "| published: ExLM (ExLM Tab. 1) | 72.8 | — |\n")
NOISE = ("| mlm | 80.8 ± 5.1 [pretraining ± 5.1, 3 seeds] (probe 54.1) | 1.23 (1.18 to 1.29) |\n"
         "| baseline: majority | 49.5 | — |\n| published: ExLM (ExLM Tab. 1) | 72.8 | — |\n")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A checkout with the reference and its three-seed build where the command looks for them."""
    monkeypatch.chdir(tmp_path)
    page(tmp_path / "reports/reference/table1-tiny.md", REFERENCE)
    page(tmp_path / "reports/reference/tiny-3seeds/table1.md", NOISE, profile="tiny-3seeds")
    return tmp_path


def test_another_arithmetic_is_named_in_the_first_line_and_judged_against_the_noise(repo, capsys):
    ours = page(repo / "reports/table1.md", REFERENCE.replace("75.8 ± 7.5", "84.0 ± 6.0").replace("1.29", "1.20"),
                arithmetic=AVX512)
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    first = out.splitlines()[0]
    assert first.startswith(f"OTHER ARITHMETIC: {ours} was computed on {AVX512}; reports/reference/table1-tiny.md on "
                            f"{AVX2}. ")
    assert "pretraining-seed spread" in first
    assert code == 3 and out.splitlines()[-1] == "reproduced within the noise"
    assert "(+8.2, pretraining-seed spread 5.1): within the noise" in out  # 8.2 <= 2 x 5.1
    assert "(-0.09, pretraining-seed spread 0.055): within the noise" in out  # half the seeds' range


def test_the_same_arithmetic_demands_identical_cells(repo, capsys):
    ours = page(repo / "reports/table1.md", REFERENCE.replace("1.29", "1.28"))  # one digit, well inside the noise
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert out.splitlines()[0].startswith(f"same arithmetic ({AVX2})")
    assert code == 1 and out.splitlines()[-1] == "not reproduced: 1 cell(s) differ on the same arithmetic"
    assert "'1.28' against the reference's '1.29' (the same arithmetic computes the same bits): DIFFERS" in out
    # in the reproducible mode the pins decide the ATen path, so one CPU model on another ATen path
    # computes alike; another CPU model does not (an Intel Xeon against AMD EPYCs, measured)
    pinned = AVX2.replace("native: each library takes the fastest path of this CPU",
                          "reproducible: ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=COMPATIBLE")
    page(repo / "reports/reference/table1-tiny.md", REFERENCE, arithmetic=pinned)
    page(ours, REFERENCE.replace("1.29", "1.28"), arithmetic=pinned.replace("(ATen AVX2)", "(ATen AVX512)"))
    assert compare(capsys, ours, "reports/reference/table1-tiny.md")[1].startswith("same arithmetic")
    page(ours, REFERENCE.replace("1.29", "1.28"), arithmetic=pinned.replace("AMD EPYC", "Intel Xeon"))
    assert compare(capsys, ours, "reports/reference/table1-tiny.md")[1].startswith("OTHER ARITHMETIC")
    page(ours, REFERENCE.replace("1.29", "1.28"), arithmetic=pinned.replace("COMPATIBLE", "AVX2"))
    assert compare(capsys, ours, "reports/reference/table1-tiny.md")[1].startswith("OTHER ARITHMETIC")
    page(repo / "reports/reference/table1-tiny.md", REFERENCE)
    page(ours, REFERENCE.replace("1.29", "1.28"), arithmetic=AVX2.replace("AMD EPYC", "Intel Xeon"))
    assert compare(capsys, ours, "reports/reference/table1-tiny.md")[1].startswith("OTHER ARITHMETIC")


def test_an_identical_table_is_reproduced_and_other_footers_are_said(repo, capsys):
    page(repo / "reports/table1.md", REFERENCE, profile="smoke", commit="def")
    code, out = compare(capsys, "reports/table1.md", "reports/reference/table1-tiny.md")
    assert code == 0 and out.splitlines()[-1] == "reproduced"
    assert out.splitlines()[1].startswith("other profile: reports/table1.md `smoke`, "
                                          "reports/reference/table1-tiny.md `tiny` (another profile builds")
    assert out.splitlines()[2] == "other git commit: reports/table1.md `def`, reports/reference/table1-tiny.md `abc`"


def test_a_footer_without_its_arithmetic_is_judged_as_another_arithmetic(repo, capsys):
    page(repo / "reports/table1.md", REFERENCE.replace("75.8", "76.0"), arithmetic=None)
    code, out = compare(capsys, "reports/table1.md", "reports/reference/table1-tiny.md")
    assert out.startswith("OTHER ARITHMETIC: reports/table1.md was computed on an arithmetic its footer does not "
                          "record")
    assert code == 3


def test_a_difference_beyond_the_spread_is_named_and_fails(repo, capsys):
    ours = page(repo / "reports/table1.md", REFERENCE.replace("75.8 ± 7.5", "90.0 ± 7.5"), arithmetic=AVX512)
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 1 and out.splitlines()[-1] == "not reproduced: 1 cell(s) beyond the noise"
    assert "row `mlm`, column `task A — accuracy, mean ± std of 3 seeds`" in out and "BEYOND the noise" in out
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md", "--within", "3")
    assert code == 3  # 14.2 <= 3 x 5.1


def test_the_noise_is_found_by_task_when_the_metric_is_reworded(repo, capsys):
    reworded = REFERENCE.replace("75.8", "84.0")
    ours = page(repo / "reports/table1.md", reworded, arithmetic=AVX512)
    for path in (ours, repo / "reports/reference/table1-tiny.md"):
        page(path, reworded if path == ours else REFERENCE, arithmetic=AVX512 if path == ours else AVX2)
        path.write_text(path.read_text().replace("— accuracy,", "— accuracy (%),"))
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 3 and "pretraining-seed spread 5.1" in out  # the noise page still says "— accuracy,"


def test_two_references_compared_find_the_noise_page_of_their_table_by_its_title(repo, capsys):
    other = page(repo / "reports/reference/table1-tiny-intel.md", REFERENCE.replace("75.8", "84.0"), arithmetic=AVX512)
    code, out = compare(capsys, other, "reports/reference/table1-tiny.md")
    assert code == 3 and "(+8.2, pretraining-seed spread 5.1): within the noise" in out


def test_a_cell_without_measured_noise_is_not_judged(repo, capsys):
    page(repo / "reports/reference/tiny-3seeds/table1.md", NOISE.replace(" [pretraining ± 5.1, 3 seeds]", ""),
         profile="tiny-3seeds")
    ours = page(repo / "reports/table1.md", REFERENCE.replace("75.8", "99.9") + "| exlm | 90.0 | 1.5 |\n",
                arithmetic=AVX512)
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert "(+24.1, no noise measured for this cell): not judged" in out and "BEYOND" not in out
    assert "- row `exlm`: only in the rebuilt table\n" in out and out.count("exlm") == 1
    assert code == 1 and out.splitlines()[-1] == ("not reproduced: 1 cell(s) beyond the noise; "
                                                  "1 cell(s) not judged (no noise measured)")
    page(ours, REFERENCE.replace("75.8", "99.9"), arithmetic=AVX512)
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 3
    assert out.splitlines()[-1] == "reproduced within the noise (1 cell(s) not judged (no noise measured))"


@pytest.mark.parametrize(("baseline", "published", "code"), [("49.6", "72.8", 3), ("49.7", "72.8", 1),
                                                              ("49.5", "72.9", 1)])
def test_baselines_move_one_unit_of_their_last_digit_and_published_rows_none(repo, capsys, baseline, published,
                                                                              code):
    ours = page(repo / "reports/table1.md",
                REFERENCE.replace("| 49.5 |", f"| {baseline} |").replace("| 72.8 |", f"| {published} |"),
                arithmetic=AVX512)
    assert compare(capsys, ours, "reports/reference/table1-tiny.md")[0] == code


def test_the_rows_read_apart_are_named_as_the_report_writes_them():
    """The row kinds `compare` tells apart by their first cell's start, found on a committed page."""
    rows = {row for _, row, _ in compare_module.read_cells(Path("reports/reference/table1-tiny.md"))}
    for start in (compare_module.BASELINE_ROW, *compare_module.EXACT_ROWS):
        assert any(row.startswith(start) for row in rows), start


def test_a_column_renamed_is_one_difference_per_header_not_one_per_cell(repo, capsys):
    renamed = "task A — accuracy, mean ± std of 5 seeds"
    ours = page(repo / "reports/table1.md", REFERENCE)
    ours.write_text(ours.read_text().replace("task A — accuracy, mean ± std of 3 seeds", renamed))
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 1 and "2 differ" in out  # one column gone, one new; no line for each of their cells
    assert f"- column `{renamed}`: only in the rebuilt table\n" in out
    assert "- column `task A — accuracy, mean ± std of 3 seeds`: only in the reference\n" in out
    assert "row `mlm`" not in out


def test_a_several_seed_reference_is_its_own_noise(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no tiny-3seeds page here
    reference = page(tmp_path / "ref.md", NOISE, profile="tiny-3seeds")
    ours = page(tmp_path / "ours.md", NOISE.replace("80.8 ± 5.1", "71.0 ± 5.1"), profile="tiny-3seeds",
                arithmetic=AVX512)
    code, out = compare(capsys, ours, reference)
    assert code == 3 and "(-9.8, pretraining-seed spread 5.1)" in out
    code, out = compare(capsys, page(tmp_path / "one.md", REFERENCE.replace("75.8", "76.0"), arithmetic=AVX512),
                        page(tmp_path / "r.md", REFERENCE))
    assert code == 3 and "not judged" in out  # a one-seed reference with no several-seed build: no noise


def test_a_page_without_a_table_is_refused_naming_it(tmp_path, capsys):
    empty = tmp_path / "empty.md"
    empty.write_text("# nothing here\n")
    with pytest.raises(SystemExit, match="empty.md: no markdown table"):
        main(["compare", str(empty), str(empty)])
    with pytest.raises(SystemExit, match="absent.md: cannot be read"):
        main(["compare", str(tmp_path / "absent.md"), str(empty)])


def test_without_a_reference_the_one_on_the_same_arithmetic_is_picked(repo, capsys):
    """A table with a reference per CPU path: `compare TABLE` picks the one its footer's arithmetic
    matches (references.yaml's current ones of its profile and table), else the first and says so."""
    page(repo / "reports/reference/table1-tiny-avx512.md", REFERENCE.replace("1.29", "1.31"), arithmetic=AVX512)
    (repo / "reports/reference/references.yaml").write_text(
        "current:\n  table1-tiny.md: {profile: tiny, table: table1}\n"
        "  table1-tiny-avx512.md: {profile: tiny, table: table1}\n  table1-smoke.md: {profile: smoke, table: table1}\n")
    page(repo / "reports/table1.md", REFERENCE.replace("1.29", "1.31"), arithmetic=AVX512)
    code, out = compare(capsys, "reports/table1.md")
    assert code == 0 and out.splitlines()[0].startswith("same arithmetic")
    assert ("reference: reports/reference/table1-tiny-avx512.md, the current table1 of `tiny` on the same "
            "arithmetic") in out
    page(repo / "reports/table1.md", REFERENCE.replace("1.29", "1.31"))  # the AVX2 path: its own reference
    code, out = compare(capsys, "reports/table1.md")
    assert code == 1 and "reference: reports/reference/table1-tiny.md," in out
    page(repo / "reports/table1.md", REFERENCE, arithmetic=AVX2.replace("AMD EPYC", "Intel Xeon"))
    code, out = compare(capsys, "reports/table1.md")
    assert code == 0 and out.splitlines()[0].startswith("OTHER ARITHMETIC")
    assert "reference: reports/reference/table1-tiny.md: none of the current table1 references of `tiny`" in out
    page(repo / "reports/table1.md", REFERENCE, profile="grid")
    with pytest.raises(SystemExit, match="no current reference of profile `grid` for table1"):
        main(["compare", "reports/table1.md"])


def test_a_reworded_record_of_the_same_pins_is_the_same_arithmetic():
    """A page built before 2026-12-01 (the AVX2 tiny reference of 2026-11-27 was one) says
    Snakemake's thread count the old way; a build today says it as the workflow's
    (maskbench.cpu_mode): the same variables in force, so the same arithmetic."""
    from maskbench.report import arithmetic

    old = AVX2 + " but where the environment sets it (OPENBLAS_NUM_THREADS=1)"
    new = AVX2 + "; OpenBLAS on the job's `threads` (OPENBLAS_NUM_THREADS=1, as Snakemake sets it for every job)"
    assert arithmetic.same([old], [new])
    assert not arithmetic.same([old], [new.replace("=1,", "=2,")]) and not arithmetic.same([old], None)
    footer = f"Generated 2026-11-27 22:58 UTC. Arithmetic of its runs' 47 job records: {old}."
    assert arithmetic.read(footer) == [old]
