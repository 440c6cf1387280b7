"""The layout rules (issues #10, #21), checked on the source: only entry points at the root, no
function outside tests over ~80 lines, no command-line script or package importing a CLI,
positional/ importing nothing from the application, no encoding named outside positional/ and
configs/, and the model (model.py and what it imports, positional/ aside) within its budget."""
import ast
import os
import re

import pytest

import positional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIS = {"train", "sample", "evaluate", "compare", "bench", "export", "measure.plots"}   # the entry points, as modules
ROOT_FILES = {"train", "sample", "evaluate", "compare", "bench", "export", "model"}
MAX_LINES = 80
MODEL_BUDGET = 700


def sources(under=""):
    for folder, dirs, files in os.walk(os.path.join(ROOT, under)):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("tests", "venv", "__pycache__", "reports")
                   and not d.startswith("out")]
        for f in files:
            if f.endswith(".py"):
                yield os.path.join(folder, f)


def imported(path, full=False):
    """Module names imported by a file (absolute imports only): top-level names, or with full=True
    every dotted name it reaches (`from measure import plots` and `from measure.plots import x`
    both give measure.plots)."""
    tree = ast.parse(open(path).read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name if full else a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module if full else node.module.split(".")[0])
            names.update(f"{node.module}.{a.name}" for a in node.names if full)
    return names


def module_of(path):
    return os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")


def imported_modules(path):
    """Dotted names a file imports, each with its parents ("measure.plots" also gives "measure")."""
    names = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in found:
            parts = name.split(".")
            names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return names


def module_name(path):
    return os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")


def test_only_entry_points_at_the_root():
    root = {os.path.basename(p)[:-3] for p in sources() if os.path.dirname(p) == ROOT}
    assert root <= ROOT_FILES, sorted(root - ROOT_FILES)


def test_no_package_imports_a_cli():
    """A CLI: a root entry point, or a package module run with python -m (it has a __main__ block)."""
    package_clis = {module_name(p) for p in sources() if os.path.dirname(p) != ROOT
                    and '__name__ == "__main__"' in open(p).read()}
    bad = {(module_name(p), m) for p in sources() if os.path.dirname(p) != ROOT
           for m in imported_modules(p) & (CLIS | package_clis) - {module_name(p)}}
    assert not bad, sorted(bad)


def test_the_model_fits_its_line_budget():
    """model.py plus every project module it imports, transitively, positional/ aside."""
    project = {module_name(p): p for p in sources()}
    todo, seen = ["model"], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in project or name.split(".")[0] == "positional":
            continue
        seen.add(name)
        todo += sorted(imported_modules(project[name]))
    lines = {name: sum(1 for _ in open(project[name])) for name in sorted(seen)}
    print(f"the model: {sum(lines.values())} lines ({lines})")
    assert sum(lines.values()) <= MODEL_BUDGET, lines


def test_no_function_longer_than_80_lines():
    long = []
    for path in sources():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_LINES:
                    long.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, long


def test_no_module_imports_a_cli():
    """Neither a library nor another entry point imports an entry point (measure.plots included)."""
    bad = [(module_of(p), m) for p in sources() for m in imported(p, full=True) & CLIS if m != module_of(p)]
    assert not bad, bad


def test_the_layout_test_catches_a_library_importing_plots(tmp_path):
    lib = tmp_path / "lib.py"
    lib.write_text("from measure.plots import draw_all\nfrom measure import plots\n")
    assert imported(lib, full=True) & CLIS == {"measure.plots"}


def test_positional_imports_nothing_from_the_application():
    app = {os.path.basename(p)[:-3] for p in sources() if os.path.dirname(p) == ROOT} | {"data", "tasks", "training"}
    bad = [(os.path.relpath(p, ROOT), m) for p in sources("positional") for m in imported(p) & app]
    assert not bad, bad


def test_no_encoding_branch_outside_positional():
    """No comparison against an encoding's name in the model, attention, cache, training,
    sampling or evaluation code: they ask the encoding's capabilities instead."""
    names = (set(positional.REGISTRY) | set(positional.SCALINGS)) - {"linear", "none"}   # also attention=linear, "no scaling"
    bad = []
    for path in sources():
        if os.path.relpath(path, ROOT).split(os.sep)[0] in ("positional", "configs", "tests"):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Compare):
                consts = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
                if consts & names:
                    bad.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} {sorted(consts & names)}")
    assert not bad, bad


def import_graph(paths):
    """{module: the project's modules it imports}, function-level and relative imports included; `from a import b`
    reaches a.b where that is a module, else a. paths: {module: file}."""
    def known(name):   # the longest project module that `name` is or is inside of
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name
    graph = {}
    for module, path in paths.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                found.update(known(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(p for p in [*parts, base] if p)
                found.update(known(f"{base}.{a.name}") or known(base) for a in node.names)
        graph[module] = found - {"", module}
    return graph


def cycles(graph):
    """The import cycles of a graph, each as the sorted modules of one strongly connected component."""
    order, low, stack, out = {}, {}, [], []

    def visit(v):   # Tarjan's algorithm
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                out.append(sorted(component))
    for v in graph:
        if v not in order:
            visit(v)
    return out


def test_no_import_cycle():
    """No two modules import each other, even inside a function (a cycle dodged by a late import is still one).
    positional/ is left out until positional/combined.py stops importing its own package (issue 48)."""
    found = cycles(import_graph({module_name(p): p for p in sources()}))
    assert not [c for c in found if not all(m.split(".")[0] == "positional" for m in c)], found
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
