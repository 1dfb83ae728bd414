"""enjoy.py's choice of policy (appo/tools/evaluate.py resolve_policy_index): `--policy_index=best` reads the run's
best_policy.json; a missing or corrupt one is a one-line EnjoyError naming the flag and the file."""

from __future__ import annotations

import pytest

from appo.tools.evaluate import EnjoyCfg, EnjoyError, resolve_policy_index


@pytest.mark.parametrize("text", [None, "{not json", '{"other": 1}'])
def test_policy_index_best_reads_best_policy_json_or_says_what_is_wrong_in_one_line(tmp_path, text):
    run = tmp_path / "run"
    run.mkdir()
    if text is not None:
        (run / "best_policy.json").write_text(text)
    cfg = EnjoyCfg(train_dir=str(tmp_path), experiment="run", policy_index="best", num_policies=2)
    with pytest.raises(EnjoyError) as raised:
        resolve_policy_index(cfg)
    message = str(raised.value)
    assert message.startswith("--policy_index=best: ") and str(run / "best_policy.json") in message
    assert "\n" not in message
    (run / "best_policy.json").write_text('{"policy_index": 1}')
    assert resolve_policy_index(cfg) == 1
