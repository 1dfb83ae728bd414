"""README.md and docs/*.md cannot go stale silently. For every page:

- every `from appo... import ...` / `import appo...` statement it shows, in a code block or in inline code, imports;
- every ```python block runs (only runnable snippets get that fence; anything that needs a trained run, or is a
  sketch, goes in a plain ``` fence);
- every `appo.<name>(...)` call in a code block names something `appo` has;
- every `--flag` it names exists: on a line that invokes a tool (train_appo.py, enjoy.py, `python -m appo.X`, the
  `appo-X` console scripts, benchmarks/*.py), in that tool's own parser (tools that forward their extra flags to
  train_appo.py also take its flags); elsewhere, in one of those parsers. Commands of other programs (pip, pytest,
  ray, tensorboard, wandb) are not checked."""

from __future__ import annotations

import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

IMPORT = re.compile(r"(?<![\w.])(from\s+appo(?:\.\w+)*\s+import\s+\w+(?:\s*,\s*\w+)*|import\s+appo(?:\.\w+)*)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9_]*(?:-[a-z0-9_]+)*)")
# A command on a line: python [-m] TARGET, an appo-X console script, or another program whose flags are not ours.
COMMAND = re.compile(
    r"python3?\s+(?:-m\s+)?(?P<target>[\w./-]+)"
    r"|(?P<script>\bappo-(?:train|enjoy|plot|sweep|export|runs))\b"
    r"|(?P<other>\b(?:pip3?\s+install|pytest|ray\s+start|tensorboard|wandb\s+sync|ruff|docker\s+run)\b)"
)
FORWARDS_TO_TRAIN = {"appo.sweep"}  # after `--`, a sweep's flags are train_appo.py's


def flags_of(parser) -> set[str]:  # noqa: ANN001 (an argparse parser)
    return {option for action in parser._actions for option in action.option_strings if option.startswith("--")}


def literal_flags(source: str) -> set[str]:
    """The `"--name"` string literals of a module's source: the flags its argparse parser declares."""
    return set(re.findall(r"""["'](--[a-z][\w-]*)["']""", source))


@cache
def train_flags() -> set[str]:
    from appo.config.cfg import build_parser

    return flags_of(build_parser())


@cache
def enjoy_flags() -> set[str]:
    from appo.config.cfg import build_parser
    from appo.tools.evaluate import EnjoyCfg

    return flags_of(build_parser("enjoy.py", EnjoyCfg))


@cache
def module_flags(name: str) -> set[str]:
    """`python -m appo.X`'s flags: its build_parser() if it has one, else the literals of the module defining main."""
    module = importlib.import_module(name)
    if hasattr(module, "build_parser"):
        flags = flags_of(module.build_parser())
    else:
        flags = literal_flags(inspect.getsource(inspect.getmodule(module.main)))
    return flags | (train_flags() if name in FORWARDS_TO_TRAIN else set())


@cache
def script_flags(path: str) -> set[str]:
    """A script's own flags (those its sibling modules add for it too: `from peer_runs import ...`); a benchmark script
    also passes train_appo.py's flags on to its runs."""
    text = (ROOT / path).read_text()
    siblings = (ROOT / path).parent
    helpers = [siblings / f"{m}.py" for m in re.findall(r"^from (\w+) import", text, flags=re.MULTILINE)]
    return (
        literal_flags(text)
        | train_flags()
        | set().union(*(literal_flags(h.read_text()) for h in helpers if h.is_file()))
    )


@cache
def any_flags() -> set[str]:
    tools = ["appo.plot", "appo.sweep", "appo.export", "appo.runs"]
    benchmarks = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "benchmarks").glob("*.py"))]
    return set().union(train_flags(), enjoy_flags(), *map(module_flags, tools), *map(script_flags, benchmarks))


def valid_flags(match: re.Match | None) -> set[str] | None:
    """The flags the command `match` takes (None: not ours to check); no match: any tool's."""
    if match is None:
        return any_flags()
    if match["other"]:
        return None
    if match["script"]:
        tool = match["script"].removeprefix("appo-")
        return {"train": train_flags, "enjoy": enjoy_flags}.get(tool, lambda: module_flags(f"appo.{tool}"))()
    target = match["target"]
    if target in ("train_appo.py", "appo.train"):
        return train_flags()
    if target == "enjoy.py":
        return enjoy_flags()
    if target.startswith("appo."):
        return module_flags(target)
    if target.endswith(".py") and (ROOT / target).is_file():
        return script_flags(target)
    return None  # another program (`python -m pytest`, `python -m pip`, ...)


def unknown_flags(line: str) -> list[str]:
    """The `--flags` of one line that the tool invoked before them on that line does not take."""
    bad = []
    commands = list(COMMAND.finditer(line))
    for flag in FLAG.finditer(line):
        before = [c for c in commands if c.start() < flag.start()]
        valid = valid_flags(before[-1] if before else None)
        if valid is not None and f"--{flag[1]}" not in valid | {"--help"}:
            bad.append(f"--{flag[1]}")
    return bad


def where(page: Path, text: str, pos: int) -> str:
    return f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, pos) + 1}"


def test_every_flag_the_docs_name_exists():
    offenders = [
        f"{page.relative_to(ROOT)}:{n}: {', '.join(bad)}  ({line.strip()[:100]})"
        for page in PAGES
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if (bad := unknown_flags(line))
    ]
    assert not offenders, "flags the docs name that no parser declares:\n" + "\n".join(offenders)


def test_a_made_up_flag_is_caught_and_real_ones_pass():
    assert unknown_flags("python train_appo.py --env=CartPole-v1 --no_such_flag=3") == ["--no_such_flag"]
    assert unknown_flags("python enjoy.py --experiment=x --no_render --num_no_such") == ["--num_no_such"]
    assert unknown_flags("python -m appo.plot train_dir/x --not_a_plot_flag") == ["--not_a_plot_flag"]
    assert unknown_flags("prose naming `--made_up_flag`") == ["--made_up_flag"]
    assert unknown_flags("python -m appo.sweep --grid '{}' --max_parallel=2 -- --env=Hopper-v5 --seed=1") == []
    assert unknown_flags("python -m pytest -q -n 2 --dist loadgroup --durations=0 --durations-min=3") == []


def test_every_import_the_docs_show_works():
    failures = []
    for page in PAGES:
        text = page.read_text()
        for m in IMPORT.finditer(text):
            statement = " ".join(m[1].split())
            try:
                exec(statement, {})  # noqa: S102 (the docs' own import lines)
            except Exception as e:  # noqa: BLE001 (any failure is the finding)
                failures.append(f"{where(page, text, m.start())}: {statement}: {type(e).__name__}: {e}")
    assert not failures, "imports in the docs that fail:\n" + "\n".join(failures)


def python_blocks() -> list[tuple[str, str]]:
    return [
        (where(page, text, m.start()), m[2])
        for page in PAGES
        for text in [page.read_text()]
        for m in FENCE.finditer(text)
        if m[1] == "python"
    ]


@pytest.mark.parametrize("place, code", python_blocks(), ids=[p for p, _ in python_blocks()])
def test_every_python_block_runs(place, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a snippet writes lands here
    exec(compile(code, place, "exec"), {"__name__": "__docs__"})  # noqa: S102 (the docs' own examples)


def test_every_appo_call_in_a_code_block_exists():
    import appo

    missing = [
        f"{where(page, text, m.start())}: appo.{name}"
        for page in PAGES
        for text in [page.read_text()]
        for block in FENCE.finditer(text)
        for m in re.finditer(r"(?<![\w.])appo\.(\w+)\s*\(", block[2])
        for name in [m[1]]
        if not hasattr(appo, name)
    ]
    assert not missing, "calls in the docs' code blocks that appo does not have:\n" + "\n".join(missing)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for page in PAGES:
        text = page.read_text()
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target, _, anchor = m[1].partition("#")
            if re.match(r"\w+://", target) or target.startswith("mailto:"):
                continue
            path = (page.parent / target).resolve() if target else page
            if not path.exists():
                broken.append(f"{where(page, text, m.start())}: {m[1]} (no such file)")
            elif anchor and path.suffix == ".md":
                headings = re.findall(r"^#+\s+(.*)$", path.read_text(), re.M)
                if anchor not in {slug(h) for h in headings}:
                    broken.append(f"{where(page, text, m.start())}: {m[1]} (no such heading)")
    assert not broken, "links in the docs that lead nowhere:\n" + "\n".join(broken)
