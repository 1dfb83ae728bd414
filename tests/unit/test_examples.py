"""examples/ holds what the docs show, the same code: docs/custom_envs.md's worked example is examples/corridor.py."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def test_the_custom_env_page_shows_examples_corridor_as_it_is() -> None:
    page = (ROOT / "docs" / "custom_envs.md").read_text()
    worked = page[page.index("## A worked example") :]
    shown = re.search(r"```python\n(.*?)```", worked, re.S).group(1)
    assert shown == (ROOT / "examples" / "corridor.py").read_text(), (
        "docs/custom_envs.md and examples/corridor.py differ"
    )
