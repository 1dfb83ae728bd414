"""The flag reference of train_appo.py as Markdown, generated from the config dataclasses (appo/config/cfg.py GROUPS):
one table per help group, in the order and with the flags of `python train_appo.py --help`, each flag with its
default (and the algorithms that change it: appo/config/algorithms/) and its help.

    python -m appo.tools.flag_reference > docs/flags.md          # regenerate docs/flags.md
    python -m appo.tools.flag_reference --check docs/flags.md    # exit 1 if it is out of date

Torch-free, like the parser it mirrors."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from appo.config.algorithms import ALGORITHMS, AlgorithmConfig
from appo.config.cfg import GROUPS

COMMAND = "python -m appo.tools.flag_reference > docs/flags.md"
INTRO = f"""# Flags

Every flag of `python train_appo.py`, grouped as `--help` groups them. This page is generated from the
config dataclasses (appo/config/cfg.py and each algorithm's flag group): do not edit it, regenerate it with
`{COMMAND}`.

Flags are flat (`--num_workers=16`); a list takes several values (`--encoder_mlp_layers 256 256`), a bool
`True` or `False` (alone: `True`). Where `--algo` changes a default, the default column says so. An env's
preset can change defaults too; a flag you type wins over both (precedence: [usage.md](usage.md#running))."""


def format_value(value: Any) -> str:
    """A default as one would type it: ints with `_` separators from 10_000 on, floats with a decimal point or a
    short exponent (1e10, 1e-6), lists as `[a, b]`, the empty string as `""`."""
    if isinstance(value, str):
        return value or '""'
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:_}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" not in text and value and not 1e-4 <= abs(value) < 1e6:  # budgets such as 1e10 read best as powers
            text = f"{value:.15e}"
        if "e" in text:
            mantissa, exponent = text.split("e")
            if "." in mantissa:
                mantissa = mantissa.rstrip("0").rstrip(".")
            text = f"{mantissa}e{int(exponent)}"
        return text
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(format_value(v) for v in value)}]"
    return str(value)


def cell(text: str) -> str:
    """Text that stays inside its table cell: a `|` would end the cell, a newline the row."""
    return text.replace("|", "\\|").replace("\n", " ")


def default_of(f: dataclasses.Field[Any]) -> Any:
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


def default_cell(name: str, default: Any, algorithms: Mapping[str, AlgorithmConfig]) -> str:
    """The default, then each different value the algorithms give it, the algorithms sharing one value together
    (`1024`; sac, rcp_r: `256`)."""
    by_value: dict[str, list[str]] = {}
    for algo, spec in algorithms.items():
        if name in spec.defaults and spec.defaults[name] != default:
            by_value.setdefault(format_value(spec.defaults[name]), []).append(algo)
    parts = [f"`{format_value(default)}`", *(f"{', '.join(names)}: `{v}`" for v, names in by_value.items())]
    return cell("; ".join(parts))


def flag_reference(
    groups: Sequence[tuple[str, type]] = GROUPS, algorithms: Mapping[str, AlgorithmConfig] = ALGORITHMS
) -> str:
    """The Markdown reference of the flags of `groups` (title, dataclass), as build_parser adds them: a flag
    declared in two groups is listed under the first only."""
    lines = [INTRO]
    seen: set[str] = set()
    for title, group_cls in groups:
        rows = []
        for f in dataclasses.fields(group_cls):
            if f.name in seen:
                continue
            seen.add(f.name)
            default = default_cell(f.name, default_of(f), algorithms)
            rows.append(f"| `--{f.name}` | {default} | {cell(f.metadata.get('help', ''))} |")
        if rows:
            lines += ["", f"## {title}", "", "| flag | default | help |", "|---|---|---|", *rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the reference, or with --check PATH compare PATH with it: exit 1 with one line if they differ."""
    parser = argparse.ArgumentParser(
        prog="python -m appo.tools.flag_reference", description="the flags of train_appo.py as Markdown"
    )
    parser.add_argument("--check", metavar="PATH", help="exit 1 if PATH differs from the generated reference")
    args = parser.parse_args(argv)
    text = flag_reference()
    if args.check is None:
        sys.stdout.write(text)
        return 0
    path = Path(args.check)
    if not path.is_file() or path.read_text() != text:
        regenerate = f"python -m appo.tools.flag_reference > {path}"
        print(f"{path} is out of date with the config dataclasses; regenerate it: {regenerate}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
