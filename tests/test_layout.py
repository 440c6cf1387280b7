"""The layout rules (issues #10, #21, #48), checked on the source: only entry points (and model.py,
generate.py) at the root, no function outside tests over ~80 lines, no command-line script or
package importing a CLI, no import cycle among the project's modules, positional/ holding only
encodings, scalings, the interface and the registry and importing nothing from the application, no
encoding named outside positional/ and configs/, model.py readable in one sitting (its lines
and their width bounded), and no line of another file, tests/ included, past 120 characters."""
import ast
import os
import re

import pytest

import positional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIS = {"train", "sample", "evaluate", "compare", "bench", "export", "measure.plots"}   # the entry points, as modules
ROOT_FILES = {"train", "sample", "evaluate", "compare", "bench", "export", "model", "generate"}
MAX_LINES = 80
MODEL_LINES, MODEL_WIDTH = 450, 100   # nanoGPT's model.py: ~330 lines, 17 of them past 100 characters
WIDTH = 120                           # every other file, tests/ included


def sources(under="", tests=False):
    """The project's Python files under `under`: tests/ left out unless tests=True, never venv, caches,
    reports or out*."""
    skipped = ("venv", "__pycache__", "reports") + (() if tests else ("tests",))
    for folder, dirs, files in os.walk(os.path.join(ROOT, under)):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skipped and not d.startswith("out")]
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


def test_model_py_reads_in_one_sitting():
    """model.py: at most MODEL_LINES lines, none wider than MODEL_WIDTH characters (a URL aside)."""
    lines = open(os.path.join(ROOT, "model.py")).read().splitlines()
    wide = [f"model.py:{i} ({len(line)} characters)" for i, line in enumerate(lines, 1)
            if len(line) > MODEL_WIDTH and "://" not in line]
    assert len(lines) <= MODEL_LINES, f"model.py has {len(lines)} lines, the bound is {MODEL_LINES}"
    assert not wide, wide


def test_no_line_past_120_tests_included():
    """Every Python file, tests/ included: no line wider than WIDTH characters (a URL aside)."""
    wide = []
    for path in sources(tests=True):
        for i, line in enumerate(open(path).read().splitlines(), 1):
            if len(line) > WIDTH and "://" not in line:
                wide.append(f"{os.path.relpath(path, ROOT)}:{i} ({len(line)} characters)")
    assert not wide, wide


def module_files(root):
    """{dotted module name: path} of the project's own modules under root (tests, reports aside)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("tests", "venv", "__pycache__", "reports")
                   and not d.startswith("out")]
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                found[os.path.relpath(path, root)[:-3].replace(os.sep, ".").removesuffix(".__init__")] = path
    return found


def import_graph(root):
    """{module: set of the project's modules it imports}, imports inside functions included, relative
    ones resolved: `from a import b` is an edge to a.b where that is a module, else to a."""
    modules = module_files(root)
    graph = {}
    for name, path in modules.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1] if package else []
                    base = ".".join(up + ([node.module] if node.module else []))
                for a in node.names:
                    target = f"{base}.{a.name}" if base else a.name
                    edges.add(target if target in modules else base)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def find_cycle(graph):
    """One import cycle as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None
    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycle_in_the_project():
    cycle = find_cycle(import_graph(ROOT))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_sees_imports_inside_functions(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from . import b\n")
    (tmp_path / "pkg" / "b.py").write_text("from pkg.a import f\n")
    (tmp_path / "c.py").write_text("import pkg.a\n")
    graph = import_graph(str(tmp_path))
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"} and graph["c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.b", "pkg.a"]
    (tmp_path / "pkg" / "a.py").write_text("")
    assert find_cycle(import_graph(str(tmp_path))) is None


def test_positional_holds_encodings_scalings_the_interface_and_the_registry():
    """Every module of positional/ is the registry (__init__), the interface (base), a scaling method
    (rope_scaling/) or the home of an encoding the registry names (ReRoPE's logit methods included)."""
    homes = {c.__module__ for c in positional.REGISTRY.values()}
    homes |= {c.__module__ for c, _ in positional.LOGIT_METHODS.values()}
    allowed = homes | {"positional", "positional.base"}
    stray = sorted(m for m in module_files(ROOT) if m.split(".")[0] == "positional" and m not in allowed
                   and not m.startswith("positional.rope_scaling"))
    assert not stray, f"not an encoding, scaling, the interface or the registry: {stray}"


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
    app = {os.path.basename(p)[:-3] for p in sources() if os.path.dirname(p) == ROOT} | {"data", "tasks", "training",
                                                                                       "attention"}
    bad = [(os.path.relpath(p, ROOT), m) for p in sources("positional") for m in imported(p) & app]
    assert not bad, bad


def test_no_encoding_branch_outside_positional():
    """No comparison against an encoding's name in the model, attention, cache, training,
    sampling or evaluation code: they ask the encoding's capabilities instead."""
    # "linear" and "none" aside: they are also attention=linear and "no scaling"
    names = (set(positional.REGISTRY) | set(positional.SCALINGS)) - {"linear", "none"}
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
