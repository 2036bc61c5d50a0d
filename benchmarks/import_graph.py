"""Measure sklode's structure from its own imports: cycles, upward imports, module sizes.

Every ``import`` and ``from ... import`` in every module counts, at module level and inside
functions alike (an import inside a function still makes a cycle, it only hides it until the
function runs). Writes ``results/import_graph.json`` and prints a summary.

    python benchmarks/import_graph.py            # summary and results file
    python benchmarks/import_graph.py --check    # exit 1 on a cycle, a method package importing
                                                 # a sibling, a shared module importing a method,
                                                 # or a library module over 800 lines
"""

import argparse
import ast
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "sklode"
METHODS = ("sklode.bcdprox", "sklode.wendy", "sklode.adjoint")
# Modules above the methods, allowed to import them: the method table and everything on top.
TOP = ("sklode.population", "sklode.petab", "sklode.registry", "sklode._methods",
       "sklode.compare", "sklode.cli", "sklode.datasets", "sklode.metrics", "sklode.plotting",
       "sklode._store", "sklode.__init__", "sklode")
MAX_LINES = 800


def module_name(path):
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(current, is_package, level, target):
    if level == 0:
        return target
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def imports_of(path, modules):
    """(imported module, line, inside a function?) for every sklode import in one file."""
    tree = ast.parse(path.read_text())
    name = module_name(path)
    is_package = path.name == "__init__.py"
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            targets = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = resolve(name, is_package, child.level, child.module or "")
                # "from . import x" may name a submodule
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in child.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target.startswith("sklode") and target != name:
                    found.append((target, child.lineno, in_function))
            visit(child, inner)

    visit(tree, False)
    return found


def graph():
    files = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    edges = {m: imports_of(p, set(files)) for m, p in files.items()}
    return files, edges


def package_of(module, files):
    """The package a module belongs to (a package's __init__ counts as the package)."""
    if files[module].name == "__init__.py":
        return module
    return module.rpartition(".")[0]


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w, _, _ in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            strong(v)
    return out


def in_package(module, package):
    return module == package or module.startswith(package + ".")


def measure():
    files, edges = graph()
    # a package's __init__ re-exports its own modules: a module importing its own package's
    # __init__ is not a cycle a reader has to think about, but we count it anyway
    sizes = {m: len(p.read_text().splitlines()) for m, p in files.items()}
    method_cross = []
    shared_to_method = []
    in_function = []
    for m, targets in edges.items():
        for target, line, inner in targets:
            if inner:
                in_function.append(f"{m}:{line} -> {target}")
            own = next((p for p in METHODS if in_package(m, p)), None)
            other = next((p for p in METHODS if in_package(target, p)), None)
            if other is None:
                continue
            if own is not None and own != other:
                method_cross.append(f"{m}:{line} -> {target}")
            if own is None and not any(in_package(m, t) for t in TOP):
                shared_to_method.append(f"{m}:{line} -> {target}")
    big = {m: n for m, n in sizes.items() if n > MAX_LINES and m != "sklode.cli"}
    return {
        "modules": len(files),
        "lines": sum(sizes.values()),
        "cycles": cycles(edges),
        "method_packages_importing_each_other": method_cross,
        "shared_modules_importing_a_method": shared_to_method,
        "imports_inside_functions": sorted(in_function),
        "modules_over_800_lines": dict(sorted(big.items(), key=lambda kv: -kv[1])),
        "cli_lines": sizes.get("sklode.cli"),
        "largest": dict(sorted(sizes.items(), key=lambda kv: -kv[1])[:10]),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    result = measure()
    out = Path(__file__).resolve().parent / "results" / "import_graph.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for key, value in result.items():
        if isinstance(value, (list, dict)) and value and key != "largest":
            print(f"{key}:")
            for item in (value.items() if isinstance(value, dict) else value):
                print("   ", item)
        else:
            print(f"{key}: {value}")
    bad = (result["cycles"] or result["method_packages_importing_each_other"]
           or result["shared_modules_importing_a_method"] or result["modules_over_800_lines"])
    return 1 if args.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
