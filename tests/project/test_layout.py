"""Imports run one way: envs/, evaluation/ and utils/ never import training/; inside training/, the launching process's
code may use what runs in Ray (launch -> trainer), never the reverse. Read from the source, so a new upward import
fails here before it makes a cycle or drags the trainer's dependencies into the evaluator."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# package -> packages it must not import
FORBIDDEN = {
    "envs": ("training", "evaluation", "utils"),
    "evaluation": ("training",),
    "utils": ("training", "evaluation"),
    "gpu_kit": ("training", "evaluation", "envs", "utils"),  # runs the project through its command lines only
    "training.trainer": ("training.launch", "training.report", "training.import_reference"),
    "training.cpu_backend": ("training.launch", "training.trainer", "training.report", "training.import_reference"),
    "training.launch": ("training.report", "training.import_reference"),
}


def imported_modules(path: Path) -> set[str]:
    """Returns every module `path` imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def upward_imports(root: Path = REPO) -> list[str]:
    """Returns 'file imports module' for every import that FORBIDDEN rules out."""
    found = []
    for package, forbidden in FORBIDDEN.items():
        for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
            for module in sorted(imported_modules(path)):
                if any(module == f or module.startswith(f + ".") for f in forbidden):
                    found.append(f"{path.relative_to(root)} imports {module}")
    return found


def test_no_package_imports_upward():
    assert upward_imports() == []


def test_an_upward_import_is_found(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "mix.py").write_text("def f():\n    from training.launch.config import compose_config\n")
    (tmp_path / "training" / "trainer").mkdir(parents=True)
    (tmp_path / "training" / "trainer" / "data.py").write_text("import training.launch.checks\nimport envs.mix\n")
    assert upward_imports(tmp_path) == [
        "envs/mix.py imports training.launch.config",
        "envs/mix.py imports training.launch.config.compose_config",
        "training/trainer/data.py imports training.launch.checks",
    ]
