"""appo.tools.plot: reading scalar series and adaptation curves back from tensorboardX event files written here,
the figures it writes, and its one-line errors."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest
from tensorboardX import SummaryWriter

from appo.tools.plot import (
    PlotError,
    adaptation_returns,
    collect,
    load_events,
    main,
    policy_summary_dirs,
    scalar_series,
)


def write_run(run: Path, policies: dict[int, dict[str, list[tuple[int, float]]]]) -> None:
    """A fake run folder: summaries/<pid>/ with the given tag -> [(step, value)] scalars."""
    for pid, tags in policies.items():
        writer = SummaryWriter(str(run / "summaries" / str(pid)))
        for tag, points in tags.items():
            for step, value in points:
                writer.add_scalar(tag, value, step)
        writer.close()


def test_scalar_series_reads_back_steps_and_values(tmp_path):
    points = [(0, 1.0), (1000, 2.5), (2500, -3.0)]
    write_run(tmp_path / "r", {0: {"episode/return_mean": points}})
    steps, wall, values = scalar_series(load_events(tmp_path / "r" / "summaries" / "0"), "episode/return_mean")
    assert steps.tolist() == [0, 1000, 2500]
    assert values.tolist() == pytest.approx([1.0, 2.5, -3.0])
    assert len(wall) == 3 and np.all(np.diff(wall) >= 0)
    assert scalar_series(load_events(tmp_path / "r" / "summaries" / "0"), "no/such_tag") is None


def test_adaptation_returns_takes_the_last_evaluation_all_episodes_logged(tmp_path):
    tags = {
        "meta_test/return_ep0": [(100, 1.0), (200, 2.0), (300, 9.0)],
        "meta_test/return_ep1": [(100, 3.0), (200, 4.0)],
        "meta_test/return_ep10": [(100, 5.0), (200, 6.0)],
    }
    write_run(tmp_path / "r", {0: tags})
    curve = adaptation_returns(load_events(tmp_path / "r" / "summaries" / "0"))
    # Step 300 lacks ep1 and ep10, so step 200 is the last complete evaluation; ep10 sorts after ep1 numerically.
    assert curve.tolist() == [2.0, 4.0, 6.0]


def test_collect_labels_policies_and_skips_runs_without_the_tag(tmp_path, capsys):
    write_run(tmp_path / "a", {0: {"episode/return_mean": [(1, 1.0)]}, 1: {"episode/return_mean": [(1, 2.0)]}})
    write_run(tmp_path / "b", {0: {"perf/fps": [(1, 100.0)]}})
    series, curves = collect([tmp_path / "a", tmp_path / "b"], "episode/return_mean")
    assert [s.label for s in series] == ["a/p0", "a/p1"]
    assert [s.values.tolist() for s in series] == [[1.0], [2.0]]
    assert curves == []
    assert "no 'episode/return_mean' scalars" in capsys.readouterr().err


def test_missing_folders_are_plot_errors(tmp_path):
    with pytest.raises(PlotError, match="no such run folder"):
        policy_summary_dirs(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PlotError, match="no summaries"):
        policy_summary_dirs(tmp_path / "empty")


def test_main_writes_returns_and_adaptation_pngs(tmp_path):
    returns = [(i * 1000, float(i)) for i in range(5)]
    adaptation = {f"meta_test/return_ep{i}": [(4000, 10.0 * i)] for i in range(3)}
    write_run(tmp_path / "run", {0: {"episode/return_mean": returns, **adaptation}})
    out = tmp_path / "figs" / "curves.png"
    assert main([str(tmp_path / "run"), "--out", str(out)]) == 0
    for path in (out, tmp_path / "figs" / "curves_adaptation.png"):
        image = mpimg.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


def test_main_default_out_and_errors(tmp_path, capsys):
    write_run(tmp_path / "run", {0: {"episode/return_mean": [(0, 1.0), (10, 2.0)]}})
    assert main([str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "plots" / "returns.png").stat().st_size > 0
    assert not (tmp_path / "run" / "plots" / "returns_adaptation.png").exists()
    capsys.readouterr()
    assert main([str(tmp_path / "run"), str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {tmp_path / 'missing'}: no such run folder"]
    assert main([str(tmp_path / "run"), "--tag", "nope"]) == 2


def test_out_without_suffix_gets_png_and_bad_out_is_one_line(tmp_path, capsys):
    write_run(tmp_path / "run", {0: {"episode/return_mean": [(0, 1.0), (10, 2.0)]}})
    assert main([str(tmp_path / "run"), "--out", str(tmp_path / "noext")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'noext.png'}"
    assert mpimg.imread(tmp_path / "noext.png").ndim == 3 and not (tmp_path / "noext").exists()
    for out in (tmp_path / "new" / "x.foo", Path("/proc/nope/x.png")):
        assert main([str(tmp_path / "run"), f"--out={out}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: --out={out}: "), err
    assert not (tmp_path / "new").exists()


def test_corrupt_best_policy_json_is_one_line(tmp_path, capsys):
    write_run(tmp_path / "run", {0: {"episode/return_mean": [(0, 1.0), (10, 2.0)]}})
    for text in ("{not json", '{"other": 1}', '{"policy_index": "x"}'):
        (tmp_path / "run" / "best_policy.json").write_text(text)
        assert main([str(tmp_path / "run"), "--policy_index=best"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --policy_index=best: "), err
        assert str(tmp_path / "run" / "best_policy.json") in err[0]
