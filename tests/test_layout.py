"""The package layout: few modules at the top, packages by role, no import cycle among module-level imports."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "mara"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _top_level_imports(path: Path) -> set[str]:
    """In-package modules imported at module level (not inside functions)."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mara") and node.level == 0:
            out.add(node.module)
            for a in node.names:  # from mara.x import submodule
                out.add(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("mara"))
    return out


def _graph() -> dict[str, set[str]]:
    mods = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        deps = {d for d in _top_level_imports(path) if d in mods and d != name}
        graph[name] = deps
    return graph


def test_few_modules_at_the_top():
    top = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 6, top


def test_no_import_cycle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in graph[n]:
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n)


def test_the_graph_sees_imports():
    """The cycle test reads real edges (a graph without edges would pass it vacuously)."""
    graph = _graph()
    assert "mara.core.config" in graph["mara.eval.runner"] and sum(map(len, graph.values())) > 50


def test_no_in_package_import_inside_a_function():
    """Every ``from mara... import`` sits at module level, so the import graph above is the whole graph."""
    inside = []
    for path in PKG.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mara"):
                        inside.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {node.module}")
                    elif isinstance(node, ast.Import) and any(a.name.startswith("mara") for a in node.names):
                        inside.append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    assert not inside, inside
