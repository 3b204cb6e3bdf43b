"""The README's commands are the ones CI and users run."""

import re

from tests.conftest import REPO


def readme_commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    return [line for block in blocks[:2] for line in block.splitlines() if line and not line.startswith("#")]


def test_ci_runs_exactly_the_readme_test_command():
    install_and_run, install_and_test = readme_commands()
    assert "reports/table1.md" in install_and_run
    assert install_and_test.strip() in (REPO / ".ci/run").read_text().splitlines()
