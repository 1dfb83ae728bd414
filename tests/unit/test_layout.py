"""The layout's promises, checked on the sources: imports point one way (a module imports only its own layer or lower
ones, counting imports inside functions), no import cycle, envs/ and utils/ (imported as appo.envs and appo.utils)
import nothing else of appo, every module under 400 lines, every source folder a package (a wheel leaves out folders
without __init__.py), (docs/architecture.md's file table: tests/unit/test_docs.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("appo", "envs", "utils")
MAX_LINES = 400

# Lowest first. A module's layer is that of the longest pattern matching its dotted name (fnmatch-like: `*` is
# one name). The algorithm registry and every algorithm's flags are the "spec" layer: parsing flags needs
# them, and they import only flags and config helpers. The rest of an algorithm is math over models.
LAYERS: list[tuple[str, ...]] = [
    ("appo.utils", "appo.utils.*"),
    ("appo.envs", "appo.envs.*"),
    (
        "appo.config",
        "appo.config.*",
        "appo.algorithms",
        "appo.algorithms.registry",
        "appo.algorithms.*.flags",
        "appo.algorithms.reward_conditioned.*_flags",
    ),
    ("appo.inference", "appo.inference.*"),  # torch-free: exported policies run with numpy alone
    ("appo.protocol", "appo.protocol.*"),
    ("appo.models", "appo.models.*"),
    ("appo.sampling", "appo.sampling.*"),
    ("appo.algorithms.*",),
    ("appo.learning", "appo.learning.*"),
    ("appo.backends", "appo.backends.*"),
    ("appo.driver", "appo.driver.*"),
    ("appo.tools", "appo.tools.*", "appo.plot", "appo.sweep", "appo.runs", "appo.export"),
    ("appo", "appo.api", "appo.cli"),  # the public face: appo.train and appo.load_policy
]


def modules() -> dict[str, Path]:
    found = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if (
                pkg != "appo"
            ):  # envs/ and utils/ sit beside appo/ and are imported (and installed) as appo.envs, appo.utils
                parts = ["appo", *parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = f
    return found


def _pattern(p: str) -> re.Pattern:
    return re.compile("^" + re.escape(p).replace(r"\*", r"[^.]+(\..+)?") + "$")


def layer_of(module: str) -> int:
    best, best_len = None, -1
    for rank, patterns in enumerate(LAYERS):
        for p in patterns:
            if _pattern(p).match(module) and len(p.replace("*", "")) > best_len:
                best, best_len = rank, len(p.replace("*", ""))
    assert best is not None, f"{module}: in no layer of tests/unit/test_layout.py LAYERS"
    return best


def imports(module: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The project modules `module` imports anywhere in its file (resolved to the longest known module)."""
    out = set()
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            while name and name not in mods:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(m, p, mods) for m, p in mods.items()}


def test_imports_point_one_way():
    upward = [
        f"{m} (layer {layer_of(m)}) imports {t} (layer {layer_of(t)})"
        for m, targets in graph().items()
        for t in sorted(targets)
        if layer_of(t) > layer_of(m)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycle():
    g = graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in g:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_envs_and_utils_import_nothing_from_appo():
    own = ("appo.envs", "appo.utils")
    bad = [f"{m} imports {t}" for m, ts in graph().items() if m.startswith(own) for t in ts if not t.startswith(own)]
    assert not bad, bad


def test_modules_under_400_lines():
    big = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


def test_every_source_folder_is_a_package():
    missing = [
        str(d.relative_to(ROOT))
        for pkg in PACKAGES
        for d in [ROOT / pkg, *(ROOT / pkg).rglob("*")]
        if d.is_dir() and d.name != "__pycache__" and any(d.glob("*.py")) and not (d / "__init__.py").exists()
    ]
    assert not missing, f"folders with modules but no __init__.py (a wheel leaves them out): {missing}"
