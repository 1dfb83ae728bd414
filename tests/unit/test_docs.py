"""The docs keep up with the tree: docs/architecture.md's `## Files` table names exactly the modules of appo/,
envs/ and utils/ (empty __init__.py files aside), and no page of docs/ nor README.md points into shared/, which
is not part of the project (the docs must stand on their own); README.md keeps its lines within 120 characters."""

from __future__ import annotations

import re

from tests.conftest import ROOT

PACKAGES = ("appo", "envs", "utils")


def files_table() -> set[str]:
    """The paths in the first cell of the rows of docs/architecture.md's `## Files` section."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("\n## Files\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\|\s*`([^`]+)`\s*\|", section, flags=re.MULTILINE))


def modules() -> set[str]:
    """Every .py file of the packages, relative to the root, except __init__.py files with nothing in them."""
    return {
        f.relative_to(ROOT).as_posix()
        for pkg in PACKAGES
        for f in (ROOT / pkg).rglob("*.py")
        if not (f.name == "__init__.py" and not f.read_text().strip())
    }


def test_files_table_lists_every_module():
    listed, present = files_table(), modules()
    missing, extra = sorted(present - listed), sorted(listed - present)
    assert not missing and not extra, (
        f"docs/architecture.md ## Files: missing {missing or 'none'}; listed but not in the tree {extra or 'none'}"
    )


def test_docs_do_not_point_into_shared():
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    offenders = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in pages
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if "shared/" in line
    ]
    assert not offenders, "docs mention shared/ (not part of the project):\n" + "\n".join(offenders)


def test_readme_lines_stay_within_120_characters():
    """README.md reads in a terminal and a diff as well as on a rendered page: no line longer than the code's."""
    lines = (ROOT / "README.md").read_text().splitlines()
    long = [f"README.md:{n}: {len(line)} characters" for n, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, "README lines over 120 characters:\n" + "\n".join(long)


BUDGET = re.compile(r"train_for_(env_steps|seconds|iterations)=")  # a flag, or appo.train's keyword


def readme_training_commands(text: str) -> list[str]:
    """The training commands of README.md's code blocks (train_appo.py, appo.sweep, appo.train), each joined over
    its continuation lines."""
    commands, in_block, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            in_block, pending = not in_block, ""
            continue
        if not in_block:
            continue
        pending += line.rstrip("\\").strip() + " "
        if line.rstrip().endswith("\\"):
            continue
        if "train_appo.py" in pending or "appo.sweep" in pending or "appo.train(" in pending:
            commands.append(pending.strip())
        pending = ""
    return commands


def test_every_readme_training_command_has_a_budget():
    """A newcomer's copy-paste ends: every training command README.md shows stops at a budget of steps, seconds
    or iterations (the default budget is 10^10 env steps)."""
    commands = readme_training_commands((ROOT / "README.md").read_text())
    assert len(commands) >= 6, commands  # ant_dir, the quickstarts, More's examples
    endless = [c for c in commands if not BUDGET.search(c)]
    assert not endless, "README training commands without a budget:\n" + "\n".join(endless)


def test_the_budget_check_sees_a_command_without_one():
    text = "```bash\npython train_appo.py --env=CartPole-v1 \\\n    --experiment=x\n```\n"
    (command,) = readme_training_commands(text)
    assert command.startswith("python train_appo.py --env=CartPole-v1") and "--experiment=x" in command
    assert not BUDGET.search(command)


def test_the_version_is_one_everywhere():
    """appo.__version__ (which setup.py reads) is the changelog's newest heading and CITATION.cff's version; a
    LICENSE file exists."""
    import appo

    newest = re.search(r"^## (\S+)", (ROOT / "docs" / "changelog.md").read_text(), flags=re.MULTILINE)
    assert newest is not None and newest[1] == appo.__version__, (newest and newest[1], appo.__version__)
    citation = re.search(r'^version: "([^"]+)"', (ROOT / "CITATION.cff").read_text(), flags=re.MULTILINE)
    assert citation is not None and citation[1] == appo.__version__
    assert '__version__ = "([^"]+)"' in (ROOT / "setup.py").read_text()  # setup.py takes appo's, not its own
    assert "MIT License" in (ROOT / "LICENSE").read_text()
