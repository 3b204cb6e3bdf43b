"""The package's shape: no import circle, reports that read results without the code that made
them, metrics in one place; and the tests' own: their helpers in one module."""

from __future__ import annotations

import ast

from tests.helpers import REPO

PACKAGE = REPO / "src/maskbench"


def module_name(path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every maskbench module and the maskbench modules it imports (anywhere in the file)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("maskbench"):
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                          for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("maskbench")}
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_no_import_circle():
    graph = imports()
    done, on_path = set(), []

    def visit(module):
        if module in on_path:
            raise AssertionError("import circle: " + " -> ".join(on_path[on_path.index(module):] + [module]))
        if module in done:
            return
        on_path.append(module)
        for imported in graph[module]:
            visit(imported)
        on_path.pop()
        done.add(module)

    for module in graph:
        visit(module)


# The modules that run the workflow: the stage table and what reads it to build jobs.
WORKFLOW_LAYER = {"maskbench.stages", "maskbench.dvc_yaml", "maskbench.plan", "maskbench.cli",
                  "maskbench.job_params", "maskbench.built", "maskbench.status"}


def test_only_the_workflow_imports_the_stage_table():
    """What a stage computes does not depend on the table that schedules it: paths come from
    maskbench.paths, settings from maskbench.config, file reading from maskbench.io."""
    importers = {m for m, deps in imports().items() if "maskbench.stages" in deps}
    assert importers <= WORKFLOW_LAYER, sorted(importers - WORKFLOW_LAYER)


def test_reports_do_not_import_training_or_fine_tuning():
    graph = imports()
    report = {m: deps for m, deps in graph.items() if m.startswith("maskbench.report")}
    assert not {d for deps in report.values() for d in deps if d.startswith(("maskbench.train", "maskbench.finetune"))}


def test_data_holds_no_metric():
    for path in (PACKAGE / "data").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not names & {"rmse", "roc_auc_per_task", "exact_match", "f1", "squad_v2_scores"}, path
        assert "sklearn.metrics" not in path.read_text(), path


def test_stages_set_up_the_cpu_only_through_compute_device():
    """A stage that set its threads itself would also skip the subnormal flush, and a trained
    ExLM's steps would run three times slower there."""
    calls = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Attribute) and node.attr in ("set_num_threads", "set_flush_denormal")}
    assert calls == {"device.py"}


def imported_test_modules(path) -> list[str]:
    """The modules named conftest or test_* that the test file at `path` imports, as `line: module`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        if any(n.split(".")[-1] == "conftest" or n.split(".")[-1].startswith("test_") for n in names):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_tests_import_helpers_from_tests_helpers_only():
    """A helper shared by tests lives in tests/helpers.py (data samples: tests/samples.py), so a test
    module never imports conftest.py (fixtures reach tests by name) or another test module."""
    offenders = {str(p.relative_to(REPO)): found for p in sorted((REPO / "tests").rglob("*.py"))
                 if (found := imported_test_modules(p))}
    assert not offenders, f"import helpers from tests.helpers instead: {offenders}"
