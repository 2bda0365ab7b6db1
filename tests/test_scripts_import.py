"""Every script in scripts/ names only functions the package still has (a moved or renamed function breaks it here,
not in the hands of someone reproducing a number)."""

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "scripts").rglob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_imports_resolve(script):
    missing = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("mara", "tasks_zoo")):
            module = importlib.import_module(node.module)
            missing += [
                f"{node.module}.{a.name}"
                for a in node.names
                if not hasattr(module, a.name) and importlib.util.find_spec(f"{node.module}.{a.name}") is None
            ]
    assert not missing, missing
