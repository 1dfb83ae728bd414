"""The layout's promises, checked on the sources: imports point one way (a module imports only its own layer or lower
ones, counting imports inside functions), no import cycle, envs/ and utils/ (imported as appo.envs and appo.utils)
import nothing else of appo, every module under 400 lines, every source folder a package (a wheel leaves out folders
without __init__.py), (docs/architecture.md's file table: tests/unit/test_docs.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("appo", "envs", "utils")
MAX_LINES = 400

# The layers, lowest first: each a folder of appo (envs/ and utils/ are appo.envs and appo.utils), and last appo's
# own modules (the public face: appo.train, appo.load_policy, the command-line programs). Every module has the
# layer of its folder; a module imports only from its own layer or lower ones. The meta-gradient loop (appo/maml/)
# sits above the driver, whose preflight it uses; the choice between the two loops is appo's own (appo/launch.py).
LAYERS: list[tuple[str, ...]] = [
    ("utils",),
    ("envs",),
    ("config",),  # flags, each algorithm's configuration and traits (appo/config/algorithms/)
    ("numpy_policy",),  # torch-free: exported policies run with numpy alone
    ("protocol",),
    ("models",),
    ("sampling",),
    ("algorithms",),
    ("learning",),
    ("backends",),
    ("driver",),
    ("maml",),
    ("tools",),
    ("",),
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


def folder_of(module: str) -> str:
    """The folder of appo a module lives in ("" for appo's own modules)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (ROOT / "appo" / parts[1]).is_dir()) else ""


def layer_of(module: str) -> int:
    folder = folder_of(module)
    ranks = [rank for rank, folders in enumerate(LAYERS) if folder in folders]
    assert ranks, f"{module}: its folder appo/{folder} is in no layer of tests/unit/test_layout.py LAYERS"
    return ranks[0]


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
