"""docs/flags.md is what appo/tools/flag_reference.py generates from the config dataclasses, it lists exactly the
flags of train_appo.py's parser under its help groups, and a field added to a config dataclass changes it."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from appo.config.algorithms import ALGORITHMS
from appo.config.cfg import GROUPS, RunCfg, build_parser
from appo.config.flags import flag
from appo.tools.flag_reference import cell, flag_reference, format_value, main
from tests.conftest import ROOT

FLAGS_MD = ROOT / "docs" / "flags.md"


def sections(text: str) -> dict[str, list[str]]:
    """The flags of each `## group` table of a reference, in order."""
    found: dict[str, list[str]] = {}
    for part in text.split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        found[title] = re.findall(r"^\| `(--\w+)` \|", body, flags=re.MULTILINE)
    return found


def parser_groups() -> dict[str, list[str]]:
    """The flags of each help group of the real parser (argparse's own groups, which hold --help, left out)."""
    return {
        group.title: [option for action in group._group_actions for option in action.option_strings]
        for group in build_parser()._action_groups
        if group.title not in ("positional arguments", "options", "optional arguments")
    }


def test_docs_flags_md_is_up_to_date():
    assert FLAGS_MD.read_text() == flag_reference(), (
        "docs/flags.md is out of date; regenerate it: python -m appo.tools.flag_reference > docs/flags.md"
    )


def test_the_reference_lists_exactly_the_parsers_flags_in_its_groups():
    listed, parsed = sections(flag_reference()), parser_groups()
    assert list(listed) == list(parsed)  # the same groups, in --help's order
    for title, flags in parsed.items():
        missing, extra = sorted(set(flags) - set(listed[title])), sorted(set(listed[title]) - set(flags))
        assert not missing and not extra, f"group {title!r}: missing {missing}; not in the parser {extra}"
        assert listed[title] == flags  # and in the same order


def test_a_field_added_to_a_config_dataclass_changes_the_reference():
    @dataclass
    class RunCfgPlusOne(RunCfg):
        made_up_flag: int = flag(7, "a flag | that does not exist")

    groups = [(title, RunCfgPlusOne if group is RunCfg else group) for title, group in GROUPS]
    text = flag_reference(groups)
    assert text != flag_reference()
    assert sections(text)["run"][-1] == "--made_up_flag"
    assert "| `--made_up_flag` | `7` | a flag \\| that does not exist |" in text


def test_an_algorithms_default_is_named_beside_the_flag():
    algorithms = {"appo": ALGORITHMS["appo"], "fake": ALGORITHMS["sac"]._replace(name="fake", defaults={"seed": 5})}
    assert "| `--seed` | `0`; fake: `5` |" in flag_reference(GROUPS, algorithms)
    assert "| `--batch_size` | `1024`; sac, rcp_r, rcp_a: `256`; udrl: `768` |" in flag_reference()


@pytest.mark.parametrize(
    "value, text",
    [
        (10_000_000_000, "10_000_000_000"),
        (64, "64"),
        (1e10, "1e10"),
        (1e-6, "1e-6"),
        (3e-4, "0.0003"),
        (120.0, "120.0"),
        (0.0, "0.0"),
        (float("inf"), "inf"),
        (True, "True"),
        ([64, 64], "[64, 64]"),
        ([], "[]"),
        ("", '""'),
        ("auto", "auto"),
    ],
)
def test_defaults_read_as_one_would_type_them(value, text):
    assert format_value(value) == text


def test_a_pipe_in_help_text_stays_in_its_cell():
    assert cell("KL(a || b)") == "KL(a \\|\\| b)"


def test_check_exits_1_with_one_line_when_the_file_differs(tmp_path, capsys):
    page = tmp_path / "flags.md"
    page.write_text(flag_reference())
    assert main(["--check", str(page)]) == 0
    page.write_text(flag_reference().replace("| `--seed` | `0` |", "| `--seed` | `1` |"))
    assert main(["--check", str(page)]) == 1
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and "python -m appo.tools.flag_reference >" in message
    assert main(["--check", str(tmp_path / "missing.md")]) == 1
