"""No module of the lab imports itself through others, and no header of
guest/lib includes itself through others.

The lab's graph is read from the source with ast, not by importing it:
`import lab.x`, `from lab import x`, `from lab.x import y` and relative
imports, at the top of a module or inside a function alike (an import
deferred into a function still ties the two modules together; it only
hides the circle until that function runs).  guest/lib's is read from
its `#include` lines that name one of its own files.
"""

import ast
import re

from lab import paths

INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]', re.MULTILINE)


def module_name(root, path):
    """lab/x.py -> lab.x, lab/sub/__init__.py -> lab.sub (@root holds lab/)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_imports(root, package="lab"):
    """{module: the package's modules it imports} of every .py file below
    @root/@package."""
    files = {module_name(root, p): p for p in sorted((root / package).rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[:len(here.split(".")) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from P import n`: the module P.n if there is one, else P's own name n
                targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in files
                           else source for alias in node.names]
            else:
                continue
            for target in targets:
                # `import lab.x.f`-like names: the longest prefix that is a module
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target:
                    found.add(target)
        graph[name] = found
    return graph


def include_graph(folder):
    """{file: the files of @folder it #includes} for its .c and .h files."""
    files = {p.name: p for p in sorted(folder.iterdir()) if p.suffix in (".c", ".h")}
    return {name: {inc for inc in INCLUDE.findall(path.read_text()) if inc in files}
            for name, path in files.items()}


def cycles(graph):
    """One cycle, as a list of nodes from a node back to it, for each group
    of nodes that reach each other (Tarjan's strongly connected components),
    and for each node that names itself."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(path_around(graph, min(group), group) for group in groups)


def path_around(graph, start, group):
    """The shortest way from @start back to itself inside @group."""
    paths_from, queue = {start: [start]}, [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node]):
            if nxt == start:
                return paths_from[node] + [start]
            if nxt in group and nxt not in paths_from:
                paths_from[nxt] = paths_from[node] + [nxt]
                queue.append(nxt)
    raise AssertionError(f"{start} is in a cycle but no path leads back to it")


def named(found):
    return "\n".join(" -> ".join(cycle) for cycle in found)


def test_the_lab_has_no_import_cycle():
    graph = python_imports(paths.ROOT)
    assert "lab.bench" in graph and "lab.host" in graph["lab.bench"], sorted(graph)
    found = cycles(graph)
    assert not found, "modules of lab/ that import each other:\n" + named(found)


def test_guest_lib_has_no_include_cycle():
    graph = include_graph(paths.GUEST_SRC / "lib")
    assert "unflush.h" in graph.get("roload.h", ()), graph
    found = cycles(graph)
    assert not found, "headers of guest/lib/ that include each other:\n" + named(found)


def test_a_cycle_through_a_deferred_or_relative_import_is_found(tmp_path):
    pkg = tmp_path / "lab"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""The package."""\n')
    (pkg / "a.py").write_text("from lab import b\n")
    (pkg / "b.py").write_text("def f():\n    from lab.sub import c\n    return c\n")
    (pkg / "sub/__init__.py").write_text("")
    (pkg / "sub/c.py").write_text("from .. import a\nfrom . import d\n")
    (pkg / "sub/d.py").write_text("import lab.sub.e\n")
    (pkg / "sub/e.py").write_text("import os\nfrom lab.sub.d import NAME\n")
    (pkg / "f.py").write_text("import lab.a\nfrom lab import paths\n")
    graph = python_imports(tmp_path)
    assert graph["lab.f"] == {"lab.a", "lab"}  # paths: a name of the package here
    assert named(cycles(graph)) == ("lab.a -> lab.b -> lab.sub.c -> lab.a\n"
                                    "lab.sub.d -> lab.sub.e -> lab.sub.d")


def test_an_include_cycle_is_found(tmp_path):
    (tmp_path / "a.h").write_text('#include <stdio.h>\n#include "b.h"\n')
    (tmp_path / "b.h").write_text('# include "c.h"\n')
    (tmp_path / "c.h").write_text('#include "a.h"\n')
    (tmp_path / "x.c").write_text('#include "a.h"\n')
    assert named(cycles(include_graph(tmp_path))) == "a.h -> b.h -> c.h -> a.h"
