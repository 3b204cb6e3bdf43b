"""The `maskbench` command line itself: a mistyped command gets the nearest ones."""

from __future__ import annotations

import pytest

from maskbench.cli import main


@pytest.mark.parametrize("argv, suggested", [
    (["pretrian", "--run", "mlm"], "did you mean 'pretrain'?"),
    (["--params", "params.yaml", "statsu"], "did you mean 'status' or 'task'?"),
    (["comapre", "a.md", "b.md"], "did you mean 'compare'?"),
])
def test_a_mistyped_command_names_the_nearest(argv, suggested, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and f"unknown command {argv[2] if argv[0] == '--params' else argv[0]!r}" in error
    assert suggested in error and "pretrain, finetune" in error


def test_a_command_with_no_near_one_lists_them_all(capsys):
    with pytest.raises(SystemExit):
        main(["xyzzy"])
    error = capsys.readouterr().err
    assert "unknown command 'xyzzy' (commands: validate, download" in error and "did you mean" not in error
