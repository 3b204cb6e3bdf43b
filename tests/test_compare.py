"""`maskbench compare TABLE REFERENCE` (maskbench.report.compare) on small synthetic pages: the
verdict, its exit code, and where each cell's noise comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from maskbench.cli import main

HEADER = ("| run | task A — accuracy, mean ± std of 3 seeds | pretraining: nats below the unigram loss |\n"
          "|---|---|---|\n")


def page(path: Path, rows: str, profile: str = "tiny") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# table1: test\n\nProfile `{profile}`; scores in %.\n\n{HEADER}{rows}\n"
                    "Generated 2026-11-27 08:00 UTC from git commit `abc`.\n")
    return path


def compare(capsys, *argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        main(["compare", *map(str, argv)])
    return stop.value.code, capsys.readouterr().out


REFERENCE = "| mlm | 75.8 ± 7.5 (probe 54.2) | 1.29 |\n| baseline: majority | 49.5 | — |\n"
NOISE = ("| mlm | 80.8 ± 5.1 [pretraining ± 5.1, 3 seeds] (probe 54.1) | 1.23 (1.18 to 1.29) |\n"
         "| baseline: majority | 49.5 | — |\n")


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A checkout with the reference and its three-seed build where the command looks for them."""
    monkeypatch.chdir(tmp_path)
    page(tmp_path / "reports/reference/table1-tiny.md", REFERENCE)
    page(tmp_path / "reports/reference/tiny-3seeds/table1.md", NOISE, profile="tiny-3seeds")
    return tmp_path


def test_an_identical_table_is_reproduced_whatever_its_footer_says(repo, capsys):
    ours = page(repo / "reports/table1.md", REFERENCE)
    ours.write_text(ours.read_text().replace("git commit `abc`", "git commit `def`"))
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 0 and out.splitlines()[-1] == "reproduced"


def test_differences_inside_the_pretraining_seed_spread_are_reproduced_within_the_noise(repo, capsys):
    ours = page(repo / "reports/table1.md", REFERENCE.replace("75.8 ± 7.5", "84.0 ± 6.0").replace("1.29", "1.20"))
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 3 and out.splitlines()[-1] == "reproduced within the noise"
    assert "(+8.2, pretraining-seed spread 5.1): within the noise" in out  # 8.2 <= 2 x 5.1
    assert "(-0.09, pretraining-seed spread 0.055): within the noise" in out  # half the seeds' range


def test_a_difference_beyond_the_spread_is_named_and_fails(repo, capsys):
    ours = page(repo / "reports/table1.md", REFERENCE.replace("75.8 ± 7.5", "90.0 ± 7.5"))
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 1 and out.splitlines()[-1] == "not reproduced: 1 cell(s) beyond the noise"
    assert "row `mlm`, column `task A — accuracy, mean ± std of 3 seeds`" in out and "BEYOND the noise" in out
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md", "--within", "3")
    assert code == 3  # 14.2 <= 3 x 5.1


def test_a_cell_without_measured_noise_reproduces_only_when_equal(repo, capsys):
    ours = page(repo / "reports/table1.md", REFERENCE.replace("| 49.5 |", "| 49.6 |") + "| exlm | 90.0 | 1.5 |\n")
    code, out = compare(capsys, ours, "reports/reference/table1-tiny.md")
    assert code == 1
    assert "row `baseline: majority`" in out and "no noise measured for this cell" in out
    assert "- row `exlm`: only in the rebuilt table\n" in out and out.count("exlm") == 1


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
    ours = page(tmp_path / "ours.md", NOISE.replace("80.8 ± 5.1", "71.0 ± 5.1"))
    code, out = compare(capsys, ours, reference)
    assert code == 3 and "(-9.8, pretraining-seed spread 5.1)" in out
    code, out = compare(capsys, page(tmp_path / "one.md", REFERENCE.replace("75.8", "76.0")),
                        page(tmp_path / "r.md", REFERENCE))
    assert code == 1 and "no noise measured" in out  # a one-seed reference with no several-seed build: no noise


def test_a_page_without_a_table_is_refused_naming_it(tmp_path, capsys):
    empty = tmp_path / "empty.md"
    empty.write_text("# nothing here\n")
    with pytest.raises(SystemExit, match="empty.md: no markdown table"):
        main(["compare", str(empty), str(empty)])
    with pytest.raises(SystemExit, match="absent.md: cannot be read"):
        main(["compare", str(tmp_path / "absent.md"), str(empty)])
