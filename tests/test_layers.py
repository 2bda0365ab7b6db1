"""The package's layers: a module imports only from its own layer and the layers below it (imports inside functions
and relative imports included), no two packages import each other in a loop, and no module-level import cycle.

``LAYERS`` is the one declaration of the order; docs/architecture.md ("Layers") explains it and lists it the same way.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mara", "tasks_zoo")  # the project's import roots; anything else is a dependency

#: bottom to top. A unit is a folder ("mara/core/": every module under it) or one module ("mara/train.py").
LAYERS = (
    ("mara/__init__.py", "mara/core/"),
    ("tasks_zoo/",),
    ("mara/curves/",),
    ("mara/predictors/",),
    ("mara/sched/",),
    ("mara/sim/", "mara/traces/"),
    ("mara/allocators/", "mara/bounds/"),
    ("mara/mat/",),
    ("mara/eval/",),
    ("mara/report/",),
    (
        "mara/pipelines/",
        "mara/train.py",
        "mara/train_settings.py",
        "mara/recipe_settings.py",
        "mara/trace_mara_settings.py",
        "mara/evaluate.py",
        "mara/generate_curves.py",
        "mara/calibrate.py",
        "mara/fidelity.py",
        "mara/readme_tables.py",
        "mara/ckpt_convert.py",
        "mara/preflight/",
        "mara/live/",
        "mara/bench/",
        "mara/peers/",
    ),
)


def modules(root: Path, packages=PACKAGES) -> dict[str, str]:
    """{dotted module name: its path relative to ``root``} for every module of ``packages``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = rel.as_posix()
    return out


def imports(root: Path, rel: str, name: str, known: dict[str, str], nested=True) -> list[tuple[int, str]]:
    """(line, imported project module) for every import in the file, relative ones resolved; ``nested``: also those
    inside functions, classes and blocks (else the module's own statements only)."""
    package = name if rel.endswith("__init__.py") else name.rpartition(".")[0]
    tree = ast.parse((root / rel).read_text())
    out = []
    for node in ast.walk(tree) if nested else tree.body:
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            # from pkg import submodule: the submodule; from module import name: the module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # import a.b.c where only a.b is a module of the tree
                t = t.rpartition(".")[0]
            if t and (node.lineno, t) not in out:
                out.append((node.lineno, t))
    return out


def unit_of(rel: str, layers=LAYERS) -> tuple[int, str] | None:
    """(layer index, unit) of a module path: the longest unit that names it."""
    found = [
        (len(u), i, u)
        for i, layer in enumerate(layers)
        for u in layer
        if rel == u or (u.endswith("/") and rel.startswith(u))
    ]
    return max(found)[1:] if found else None


def layer_faults(root: Path, layers=LAYERS, packages=PACKAGES) -> list[str]:
    """One line per fault: a module in no layer, an import from a lower layer to a higher one, units of one layer that
    import each other in a loop (a loop across layers always has an upward import, reported as such)."""
    known = modules(root, packages)
    faults, edges = [], {}
    for name, rel in known.items():
        here = unit_of(rel, layers)
        if here is None:
            faults.append(f"{rel}: in no layer (add it to LAYERS)")
            continue
        for line, target in imports(root, rel, name, known):
            there = unit_of(known[target], layers)
            if there is None or there[1] == here[1]:
                continue
            if there[0] == here[0]:
                edges.setdefault(here[1], {}).setdefault(there[1], f"{rel}:{line}")
            elif there[0] > here[0]:
                faults.append(
                    f"{rel}:{line} imports {target}: {here[1]} (layer {here[0]}) may not import "
                    f"{there[1]} (layer {there[0]})"
                )
    return faults + [f"units import each other in a loop: {c}" for c in _cycles(edges)]


def _cycles(edges: dict[str, dict[str, str]]) -> list[str]:
    """Each loop of the unit graph found by a depth-first walk, as 'a -> b (file:line) -> a (file:line)'."""
    state, stack, found = {}, [], []

    def visit(u):
        state[u] = 1
        stack.append(u)
        for v in edges.get(u, {}):
            if state.get(v) == 1:
                loop = stack[stack.index(v) :] + [v]
                found.append(" -> ".join(f"{b} ({edges[a][b]})" if a else b for a, b in zip([None] + loop, loop)))
            elif v not in state:
                visit(v)
        stack.pop()
        state[u] = 2

    for u in list(edges):
        if u not in state:
            visit(u)
    return found


def test_no_import_from_a_lower_layer_to_a_higher_one():
    faults = layer_faults(ROOT)
    assert not faults, "\n" + "\n".join(faults)


def test_the_checker_reads_real_imports():
    """The layer test reads the tree's edges (a checker that saw none would pass vacuously)."""
    known = modules(ROOT)

    def targets(name, nested=True):
        return {t for _, t in imports(ROOT, known[name], name, known, nested)}

    assert "mara.core.config" in targets("mara.eval.runner")
    generation = "mara.curves.generation"  # imports the zoo inside its functions only
    assert "tasks_zoo.registry" in targets(generation) and "tasks_zoo.registry" not in targets(generation, nested=False)
    assert unit_of("mara/eval/runner.py")[1] == "mara/eval/" and unit_of("mara/train.py")[1] == "mara/train.py"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


TINY_LAYERS = (("pkg/__init__.py", "pkg/low/"), ("pkg/high/", "pkg/side.py"))
TINY = {
    "pkg/__init__.py": "",
    "pkg/low/__init__.py": "",
    "pkg/low/a.py": "import os\n\nX = 1\n",
    "pkg/high/__init__.py": "",
    "pkg/high/b.py": "from ..low import a\nfrom pkg.low.a import X\n",
    "pkg/side.py": "import pkg.high.b\n",
}


def test_a_clean_tree_passes(tmp_path):
    assert layer_faults(_tree(tmp_path, TINY), TINY_LAYERS, ("pkg",)) == []


def test_an_upward_import_is_flagged_with_its_file_and_line(tmp_path):
    up = "import os\n\n\ndef f():\n    from pkg.high import b\n    return b\n"  # inside a function
    faults = layer_faults(_tree(tmp_path, TINY | {"pkg/low/a.py": up}), TINY_LAYERS, ("pkg",))
    assert any(f.startswith("pkg/low/a.py:5 imports pkg.high.b: pkg/low/ (layer 0)") for f in faults), faults


def test_a_relative_upward_import_is_flagged(tmp_path):
    faults = layer_faults(_tree(tmp_path, TINY | {"pkg/low/c.py": "from ..high.b import a\n"}), TINY_LAYERS, ("pkg",))
    assert any(f.startswith("pkg/low/c.py:1 imports pkg.high.b") for f in faults), faults


def test_a_loop_within_one_layer_and_a_module_in_no_layer_are_flagged(tmp_path):
    tree = _tree(tmp_path, TINY | {"pkg/high/c.py": "from pkg import side\n", "pkg/stray.py": ""})
    faults = layer_faults(tree, TINY_LAYERS, ("pkg",))
    assert "pkg/stray.py: in no layer (add it to LAYERS)" in faults
    assert any(
        f.startswith("units import each other in a loop: ") and "pkg/side.py:1" in f and "pkg/high/c.py:1" in f
        for f in faults
    ), faults


def test_the_architecture_page_lists_the_declared_layers():
    page = (ROOT / "docs" / "architecture.md").read_text()
    section = page[page.index("## Layers") :]
    section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    items = re.findall(r"^\d+\. (.*?) — ", section, flags=re.M | re.S)  # each numbered item's units, up to its dash
    assert [re.findall(r"`([\w/.]+)`", units) for units in items] == [list(layer) for layer in LAYERS]


def test_no_module_level_import_cycle():
    """Within a unit too: modules import each other at module level in no loop."""
    known = modules(ROOT)
    graph = {n: {t for _, t in imports(ROOT, rel, n, known, nested=False)} - {n} for n, rel in known.items()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in graph[n]:
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d) :] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in graph:
        if n not in state:
            visit(n)


def test_no_in_package_import_inside_a_function():
    """Every ``from mara... import`` sits at module level, so the module-level graph above is the whole graph."""
    inside = []
    for path in (ROOT / "mara").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mara"):
                        inside.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}")
                    elif isinstance(node, ast.Import) and any(a.name.startswith("mara") for a in node.names):
                        inside.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not inside, inside
