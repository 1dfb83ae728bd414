"""MAML-TRPO runs end to end (train_appo.py --algo=maml_trpo) on the engine's actor workers: the same seed gives
bit-identical iterations with one actor worker and with four, and a run stopped and resumed goes on as if it had
not stopped; an actor worker killed mid-run is started again and the iterations do not change; the meta-test runs
during training when enabled and logs undiscounted episode returns; a bad env is one line; the MuJoCo families run
(half_cheetah_dir on its direction tasks)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import appo
from appo.learning.checkpoint import load_latest
from appo.tools.plot import load_events
from tests.conftest import run_script
from tests.integration.test_export import run_python

TINY = [
    "--algo=maml_trpo",
    "--meta_batch_size=4",
    "--fast_batch_size=3",
    "--max_episode_steps=20",
    "--num_test_tasks=2",
    "--meta_test_steps=2",
    "--meta_test_interval=0",
    "--seed=3",
]


def scalars(exp: Path) -> dict[str, list[tuple[int, float]]]:
    acc = load_events(exp / "summaries" / "0")
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def train(train_dir: Path, name: str, *args: str, env: str = "navigation2d") -> Path:
    run_script(
        "train_appo.py", [*TINY, f"--env={env}", f"--train_dir={train_dir}", f"--experiment={name}", *args], 240, True
    )
    return train_dir / name


@pytest.mark.slow
def test_one_and_four_workers_and_a_resumed_run_give_identical_iterations(train_dir: Path) -> None:
    # One worker, stopped after one iteration and resumed for the second; four workers in one go.
    one = train(train_dir, "w1", "--num_workers=1", "--train_for_iterations=1", "--save_every_sec=0")
    assert load_latest(one / "checkpoint_p0")[0]["version"] == 1
    train(train_dir, "w1", "--num_workers=1", "--train_for_iterations=2", "--save_every_sec=0")
    four = train(train_dir, "w4", "--num_workers=4", "--train_for_iterations=2", "--meta_test_interval=1")
    a, b = scalars(one), scalars(four)
    assert [v for _, v in a["train/version"]] == [1.0, 2.0]  # the resumed session ran one iteration, not two
    for tag in ("maml/return_pre", "maml/return_post", "maml/kl", "maml/surrogate_after", "maml/ls_steps"):
        assert len(a[tag]) == 2 and a[tag] == b[tag], (tag, a[tag], b[tag])
    state_a, state_b = load_latest(one / "checkpoint_p0")[0], load_latest(four / "checkpoint_p0")[0]
    assert state_a["version"] == state_b["version"] == 2
    for name, value in state_a["model"].items():
        assert torch.equal(value, state_b["model"][name]), name
    npz_a, npz_b = np.load(one / "meta_test" / "iter_2.npz"), np.load(four / "meta_test" / "iter_2.npz")
    assert sorted(p.name for p in (one / "meta_test").iterdir()) == ["iter_1.npz", "iter_2.npz"]
    assert npz_a["returns"].shape == (3, 2, 3)  # [meta_test_steps + 1, test tasks, episodes]
    assert np.array_equal(npz_a["returns"], npz_b["returns"]) and np.array_equal(npz_a["tasks"], npz_b["tasks"])
    # The returns are undiscounted sums of 20 rewards -distance (distance < 1.5 within 20 steps of 0.1 from the
    # origin, goals in [-0.5, 0.5]^2), not a per-step average.
    assert all(-20 * 1.5 < v < -1.0 for _, v in a["maml/return_pre"])
    assert (-30 < npz_a["returns"]).all() and (npz_a["returns"] < -1.0).all()
    # With --meta_test_interval=1 the meta-test ran during training (seed defect: only when disabled), once per
    # iteration, and its summaries are the npz's means.
    assert sorted(p.name for p in (four / "meta_test").iterdir()) == ["iter_1.npz", "iter_2.npz"]
    assert np.array_equal(
        np.load(one / "meta_test" / "iter_1.npz")["returns"], np.load(four / "meta_test" / "iter_1.npz")["returns"]
    )
    # enjoy.py adapts the run's meta-policy to one held-out task and shows both phases.
    result = run_script(
        "enjoy.py", [f"--train_dir={train_dir}", "--experiment=w4", "--no_render", "--task=1"], check=True
    )
    lines = result.stdout.splitlines()
    assert any(line.startswith("test task 1:") for line in lines), result.stdout
    assert [line.split(":")[0] for line in lines if "adaptation:" in line] == ["before adaptation", "after adaptation"]
    logged = [v for _, v in b["meta_test/return_step0"]]
    means = [float(np.load(four / "meta_test" / f"iter_{i}.npz")["returns"][0].mean()) for i in (1, 2)]
    assert logged == pytest.approx(means, rel=1e-6)


@pytest.mark.slow
def test_killed_actor_worker_is_started_again_and_the_iterations_do_not_change(train_dir: Path) -> None:
    # SIGKILL to an actor worker of a running MAML run: the Supervisor starts it again, the tasks it held are run
    # again from the same seeds, and every iteration is bit for bit that of a run nothing happened to.
    from tests.integration.test_faults import _wait_for, find, finish, start

    more = ["--env=navigation2d", "--num_workers=2", "--train_for_iterations=8", "--fast_batch_size=10"]
    more += ["--max_episode_steps=60", f"--train_dir={train_dir}"]
    proc = start([*TINY, *more, "--experiment=killed"])
    log = train_dir / "killed" / "log.txt"
    _wait_for(log, "iteration 2,", timeout=120)
    find(proc, "appo:killed:actor_worker_1").kill()
    out = finish(proc, timeout=240)
    assert proc.returncode == 0, out[-3000:]
    assert "actor_worker_1 killed by signal 9: starting it again" in log.read_text()
    run_script("train_appo.py", [*TINY, *more, "--experiment=calm"], 240, True)
    killed, calm = scalars(train_dir / "killed"), scalars(train_dir / "calm")
    for tag in ("maml/return_pre", "maml/return_post", "maml/kl", "train/version"):
        assert len(killed[tag]) == 8 and killed[tag] == calm[tag], (tag, killed[tag], calm[tag])


def test_two_inner_steps_take_the_learners_own_kl_product(train_dir: Path) -> None:
    # The helper processes' per-task products assume one inner step (at two, 0.27 relative error against the KL's
    # Hessian): with more, the TRPO step must use the learner's own product, the one --serial_mode computes, so the
    # two modes give the same iterations and weights. The meta-test adapts with the trained number of steps too.
    args = ["--num_inner_steps=2", "--train_for_iterations=2", "--num_workers=1", "--meta_test_interval=1"]
    procs, serial = train(train_dir, "procs", *args), train(train_dir, "serial", *args, "--serial_mode=True")
    a, b = scalars(procs), scalars(serial)
    for tag in ("maml/kl", "maml/surrogate_after", "maml/ls_steps", "maml/return_post", "train/version"):
        assert len(a[tag]) == 2 and a[tag] == b[tag], (tag, a[tag], b[tag])
    (wa, _), (wb, _) = load_latest(procs / "checkpoint_p0"), load_latest(serial / "checkpoint_p0")
    assert all(torch.equal(wa["model"][k], wb["model"][k]) for k in wa["model"])
    npz_a, npz_b = np.load(procs / "meta_test" / "iter_2.npz"), np.load(serial / "meta_test" / "iter_2.npz")
    np.testing.assert_array_equal(npz_a["returns"], npz_b["returns"])


@pytest.mark.parametrize(("env", "flag"), [("bandit", "--num_arms=5"), ("tabular_mdp", "--mdp_states=6")])
@pytest.mark.slow
def test_discrete_families_run_alike_on_one_and_two_workers_and_export(train_dir: Path, env: str, flag: str) -> None:
    """The bandits and tabular MDPs (Discrete actions): a categorical policy whose draws come from each episode's
    seed (Gumbel-max), so one and two actor workers give the same iterations; enjoy.py adapts it; its ONNX export
    and its numpy policy act alike."""
    runs = {}
    for workers in (1, 2):
        args = (f"--num_workers={workers}", "--train_for_iterations=2", "--meta_test_interval=1", flag)
        runs[workers] = train(train_dir, f"{env}{workers}", *args, env=env)
    a, b = scalars(runs[1]), scalars(runs[2])
    for tag in ("maml/return_pre", "maml/return_post", "maml/kl", "maml/surrogate_after", "meta_test/return_step1"):
        assert len(a[tag]) == 2 and a[tag] == b[tag], (tag, a[tag], b[tag])
    (wa, _), (wb, _) = load_latest(runs[1] / "checkpoint_p0"), load_latest(runs[2] / "checkpoint_p0")
    assert all(torch.equal(wa["model"][k], wb["model"][k]) for k in wa["model"])
    returns = np.load(runs[1] / "meta_test" / "iter_2.npz")["returns"]
    assert returns.shape == (3, 2, 3) and np.isfinite(returns).all()
    if env == "bandit":  # one pull an episode, paying 0 or 1
        assert set(np.unique(returns)) <= {0.0, 1.0}
    result = run_script("enjoy.py", [f"--train_dir={train_dir}", f"--experiment={env}2", "--no_render", "--task=0"])
    lines = [line.split(":")[0] for line in result.stdout.splitlines() if "adaptation:" in line]
    assert result.returncode == 0 and lines == ["before adaptation", "after adaptation"], result.stdout[-2000:]
    ort = pytest.importorskip("onnxruntime")
    out = train_dir / f"{env}.onnx"
    export = ["-m", "appo.export", f"--train_dir={train_dir}", f"--experiment={env}2", "--format=onnx", f"--out={out}"]
    assert f"wrote {out}" in run_python(export)
    policy = appo.load_policy(runs[2])
    obs = np.random.default_rng(0).random((16, *policy.meta["observation_shape"]), dtype=np.float32)
    session = ort.InferenceSession(str(out))
    onnx_actions, _ = session.run(None, {"obs": obs, "rnn_state": np.zeros((16, 1), np.float32)})
    np.testing.assert_array_equal(onnx_actions[:, 0], policy.act(obs)[0])


def test_bad_env_is_one_line_naming_the_flag(train_dir: Path) -> None:
    result = run_script("train_appo.py", ["--algo=maml_trpo", "--env=CartPole-v1", f"--train_dir={train_dir}"])
    assert result.returncode == 2
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--env=CartPole-v1: --algo=maml_trpo needs a task family" in errors[0], result.stdout


@pytest.mark.mujoco
@pytest.mark.parametrize("env", ["half_cheetah_dir", "ant_dir"])
def test_mujoco_families_smoke(train_dir: Path, env: str) -> None:
    exp = train(
        train_dir,
        env,
        "--meta_batch_size=2",
        "--fast_batch_size=2",
        "--num_workers=2",
        "--train_for_iterations=2",
        env=env,
    )
    data = np.load(exp / "meta_test" / "iter_2.npz")
    assert data["returns"].shape == (3, 2, 2) and np.isfinite(data["returns"]).all()
    # A finite family: the test split is its whole task set, in order (the direction, not a velocity).
    assert list(data["task_keys"]) == ["direction"] and data["tasks"].ravel().tolist() == [-1.0, 1.0]
    tags = scalars(exp)
    assert all(np.isfinite(v) for tag in tags for _, v in tags[tag])


@pytest.mark.mujoco
def test_half_cheetah_dir_rewards_the_direction() -> None:
    # Seed defect: its half_cheetah_dir config trained the velocity task. The same episodes run forward and
    # backward: rewards are direction * x_velocity - control cost, so their sum is minus twice the control cost
    # and their difference twice the velocity.
    from tests.unit.test_maml_actors import sample_tasks

    rewards, actions = sample_tasks("half_cheetah_dir", [{"direction": 1.0}, {"direction": -1.0}])
    assert np.array_equal(actions[0], actions[1])
    ctrl = 0.05 * (np.clip(actions[0], -1, 1).astype(np.float64) ** 2).sum(-1)
    np.testing.assert_allclose(rewards[0] + rewards[1], -2 * ctrl, rtol=1e-4, atol=1e-5)
    assert np.abs(rewards[0] - rewards[1]).max() > 0.05
