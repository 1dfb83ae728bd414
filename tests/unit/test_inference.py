"""A trained policy outside the engine (appo/numpy_policy/): `Policy` acts as the torch model does, for every model
kind the engine trains (actor-critic MLP / GRU / LSTM / separate value trunk, Discrete and Box, SAC's squashed
Gaussian, MAML's Gaussian MLP, the command policy); an npz policy file reads back bit for bit; importing appo and
acting from an npz never imports torch; bad files give one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import appo
from appo.config.cfg import Cfg
from appo.models.numpy_twins import numpy_description
from appo.models.registry import make_model
from appo.numpy_policy.policy import Policy
from appo.numpy_policy.policy_file import PolicyFileError, read_policy_file, write_policy_file
from appo.protocol.buffers import rnn_state_size
from tests.conftest import ROOT

OBS = gym.spaces.Box(-np.inf, np.inf, (6,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
DISCRETE = gym.spaces.Discrete(4)

CASES = {
    "mlp_box": (Cfg(), BOX),
    "mlp_discrete": (Cfg(nonlinearity="relu"), gym.spaces.Discrete(4)),
    "gru": (Cfg(use_rnn=True, rnn_size=16), BOX),
    "lstm": (Cfg(use_rnn=True, rnn_type="lstm", rnn_size=16, nonlinearity="elu"), gym.spaces.Discrete(3)),
    "value_trunk": (Cfg(separate_value_trunk=True), BOX),
    "value_trunk_wide": (Cfg(separate_value_trunk=True, value_mlp_layers=[96, 48]), BOX),
    "sac": (Cfg(algo="sac", actor_mlp_layers=[32, 32]), gym.spaces.Box(-2.0, 2.0, (3,), np.float32)),
    "maml": (Cfg(algo="maml_trpo", maml_mlp_layers=[32, 32]), BOX),
    "maml_discrete": (Cfg(algo="maml_trpo", maml_mlp_layers=[32, 32]), gym.spaces.Discrete(4)),
    "command_box": (Cfg(algo="udrl", command_mlp_layers=[32, 32]), BOX),
    "command_discrete": (Cfg(algo="rcp_r", command_mlp_layers=[32, 32]), gym.spaces.Discrete(4)),
}


def trained_like(cfg: Cfg, action_space: gym.Space, seed: int = 0) -> torch.nn.Module:
    """A model of the run's kind with weights moved off their initialisation and, where there is one, a
    normaliser that has seen data (and past the warm-up of models that have one)."""
    torch.manual_seed(seed)
    obs_space = OBS
    if cfg.command_dims:
        obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS.shape[0] + cfg.command_dims,), np.float32)
    model = make_model(cfg, obs_space, action_space).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        if getattr(model, "obs_normalizer", None) is not None:
            model.obs_normalizer.update(torch.randn(500, *obs_space.shape, dtype=torch.float64) * 3 + 1)
        if hasattr(model, "updates"):
            model.updates.fill_(7)
    return model


def as_policy(model: torch.nn.Module, cfg: Cfg, action_space: gym.Space, obs_dim: int) -> Policy:
    """The Policy that appo.tools.export.policy_parts makes of a run's model, here without a run."""
    if isinstance(action_space, gym.spaces.Discrete):
        action, arrays = {"type": "Discrete", "n": int(action_space.n)}, {}
    else:
        action = {"type": "Box", "shape": list(action_space.shape)}
        arrays = {"action/low": action_space.low, "action/high": action_space.high}
    meta = {
        "model": numpy_description(model),
        "cfg": {"env": "test", "seed": 0},
        "observation_shape": [obs_dim],
        "action": action,
    }
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    return Policy(meta, state, arrays)


def torch_step(model, cfg, obs: np.ndarray, rnn: torch.Tensor) -> tuple[np.ndarray, torch.Tensor]:
    if not hasattr(model, "act"):  # MAML's policies: the mean, or the most likely action
        with torch.no_grad():
            return model.mode(torch.from_numpy(obs)).numpy(), rnn
    out = model.act(torch.from_numpy(obs), rnn, deterministic=True)
    return out.actions.numpy(), out.rnn_states


@pytest.mark.parametrize("case", sorted(CASES))
def test_policy_acts_as_the_torch_model(case: str):
    cfg, action_space = CASES[case]
    model = trained_like(cfg, action_space)
    obs_dim = OBS.shape[0] + cfg.command_dims
    policy = as_policy(model, cfg, action_space, obs_dim)
    assert policy.state_size == (rnn_state_size(cfg) if cfg.use_rnn else 0)
    rng = np.random.default_rng(1)
    batch = (rng.standard_normal((8, obs_dim)) * 3).astype(np.float32)
    rnn = torch.zeros(8, rnn_state_size(cfg))
    state = policy.initial_state(8)
    for _ in range(5):  # several steps: the recurrent state is carried
        expected, rnn = torch_step(model, cfg, batch, rnn)
        actions, state = policy.act(batch, state)
        if isinstance(action_space, gym.spaces.Discrete):
            assert actions.dtype == np.int64 and actions.shape == (8,)
            np.testing.assert_array_equal(actions, expected[:, 0])
        else:
            assert actions.shape == (8, 3)
            np.testing.assert_allclose(actions, np.clip(expected, action_space.low, action_space.high), atol=1e-5)
        if cfg.use_rnn:
            np.testing.assert_allclose(state, rnn.numpy(), atol=1e-5)
        else:
            assert state is None
        batch = (batch + rng.standard_normal(batch.shape).astype(np.float32)).astype(np.float32)
    # One observation: the same action as its row of a batch, an int for Discrete, the state of one env.
    one, one_state = policy.act(batch[0], None if state is None else policy.initial_state())
    many, _ = policy.act(batch, policy.initial_state(8))
    if isinstance(action_space, gym.spaces.Discrete):
        assert isinstance(one, int) and one == many[0]
    else:
        np.testing.assert_allclose(one, many[0], atol=1e-6)
    assert (one_state is None) == (not cfg.use_rnn)


def test_wrong_observation_shape_is_a_clear_error():
    cfg, space = CASES["mlp_box"]
    policy = as_policy(trained_like(cfg, space), cfg, space, 6)
    with pytest.raises(ValueError, match=r"observation of shape \(4,\): the policy takes \(6,\)"):
        policy.act(np.zeros(4))


def export_npz(tmp_path: Path, case: str) -> tuple[Path, Policy, np.ndarray]:
    cfg, space = CASES[case]
    model = trained_like(cfg, space)
    policy = as_policy(model, cfg, space, 6)
    arrays = {} if policy.discrete else {"action/low": space.low, "action/high": space.high}
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = write_policy_file(tmp_path / f"{case}.npz", policy.meta, state, arrays)
    obs = np.random.default_rng(5).standard_normal((16, 6)).astype(np.float32)
    return path, policy, obs


@pytest.mark.parametrize("case", ["gru", "mlp_discrete"])
def test_npz_file_reads_back_bit_for_bit(tmp_path: Path, case: str):
    path, policy, obs = export_npz(tmp_path, case)
    loaded = appo.load_policy(path)
    a, s = policy.act(obs, policy.initial_state(16))
    b, t = loaded.act(obs, loaded.initial_state(16))
    np.testing.assert_array_equal(a, b)
    if s is not None:
        np.testing.assert_array_equal(s, t)
    meta, state, _ = read_policy_file(path)
    assert meta["model"] == policy.meta["model"] and "encoder.0.weight" in state
    assert not list(tmp_path.glob("*.tmp"))


def test_npz_policy_runs_without_torch(tmp_path: Path):
    """A process where `import torch` fails: `import appo`, load the npz, act; the actions are the torch
    process's."""
    path, policy, obs = export_npz(tmp_path, "gru")
    np.save(tmp_path / "obs.npy", obs)
    expected, _ = policy.act(obs, policy.initial_state(16))
    script = (
        "import sys; sys.modules['torch'] = None\n"  # any import of torch now raises
        "import numpy as np, appo\n"
        f"p = appo.load_policy({str(path)!r})\n"
        f"a, s = p.act(np.load({str(tmp_path / 'obs.npy')!r}), p.initial_state(16))\n"
        f"np.save({str(tmp_path / 'actions.npy')!r}, a)\n"
        "assert not any(m == 'torch' or m.startswith('torch.') for m in sys.modules if sys.modules[m] is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "actions.npy"), expected)


@pytest.mark.parametrize("case", ["maml", "maml_discrete"])
def test_policy_files_with_old_pass_kinds_still_load(tmp_path: Path, case: str):
    """Files exported when MAML's passes had kinds of their own ("maml_gaussian_mlp", "maml_categorical_mlp", with
    no "distribution" in the description) load as model kind "maml_mlp" and act as a file written today."""
    path, policy, obs = export_npz(tmp_path, case)
    meta, state, arrays = read_policy_file(path)
    old_kind = "maml_categorical_mlp" if case == "maml_discrete" else "maml_gaussian_mlp"
    meta = {k: v for k, v in meta.items() if k not in ("format", "version")}
    meta["model"] = {"kind": old_kind, "activation": meta["model"]["activation"]}
    old = appo.load_policy(write_policy_file(tmp_path / "old.npz", meta, state, arrays))
    new = appo.load_policy(path)
    assert old.kind == new.kind == "maml_mlp" and old.meta["model"] == new.meta["model"] == policy.meta["model"]
    np.testing.assert_array_equal(old.act(obs)[0], new.act(obs)[0])
    np.testing.assert_array_equal(old.act(obs, deterministic=False)[0], new.act(obs, deterministic=False)[0])


def test_pass_kinds_are_the_model_kinds():
    """One registry of numpy passes, keyed by the model kinds of appo/models/registry.py, and every torch model's
    twin (appo/models/numpy_twins.py) describes its model under that kind."""
    from appo.models.numpy_twins import TWINS
    from appo.models.registry import MODELS
    from appo.numpy_policy.registry import NUMPY_PASSES

    assert set(NUMPY_PASSES) <= set(MODELS)
    assert {cls.kind for cls in TWINS} == set(NUMPY_PASSES)


def test_bad_policy_files_are_one_line_errors(tmp_path: Path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    np.savez(tmp_path / "foreign.npz", x=np.zeros(3))
    with pytest.raises(PolicyFileError, match=r"junk\.npz: not a readable \.npz"):
        appo.load_policy(tmp_path / "junk.npz")
    with pytest.raises(PolicyFileError, match=r"foreign\.npz: not an appo policy file"):
        appo.load_policy(tmp_path / "foreign.npz")
    with pytest.raises(ValueError, match=r"missing\.npz: no such file"):
        appo.load_policy(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match="not a run directory"):
        appo.load_policy(tmp_path)


@pytest.mark.parametrize("activation, steps, space", [("tanh", 1, BOX), ("relu", 2, BOX), ("tanh", 2, DISCRETE)])
def test_maml_adapt_in_numpy_is_the_meta_learners(activation: str, steps: int, space: gym.Space):
    """Policy.adapt (numpy, hand-written gradients) against MamlTrpo.adapted (torch autograd) on ragged episodes,
    Gaussian and categorical."""
    from appo.maml.algorithm import Episodes, MamlTrpo

    cfg = Cfg(algo="maml_trpo", maml_mlp_layers=[16, 16], maml_nonlinearity=activation, num_inner_steps=steps)
    cfg.fast_lr = 0.1  # steps of 0.1 each: an adaptation large enough to change a categorical policy's argmax
    model = trained_like(cfg, space)
    policy = as_policy(model, cfg, space, 6)
    policy.meta["cfg"].update(num_inner_steps=steps, fast_lr=cfg.fast_lr, gamma=cfg.gamma, gae_lambda=cfg.gae_lambda)
    rng = np.random.default_rng(3)

    def actions(n: int) -> np.ndarray:
        if isinstance(space, gym.spaces.Discrete):  # as Policy.collect records them: indices [n, 1]
            return rng.integers(0, space.n, (n, 1)).astype(np.int64)
        return rng.standard_normal((n, 3)).astype(np.float32)

    episodes = [
        {
            "obs": rng.standard_normal((n, 6)).astype(np.float32),
            "actions": actions(n),
            "rewards": rng.standard_normal(n),
        }
        for n in (20, 13, 20, 7)
    ]
    adapted = policy.adapt(episodes)
    T = 20
    padded = {k: np.zeros((4, T, *episodes[0][k].shape[1:]), np.float32) for k in ("obs", "actions", "rewards")}
    mask = np.zeros((4, T), np.float32)
    for i, e in enumerate(episodes):
        n = len(e["rewards"])
        for k in padded:
            padded[k][i, :n] = e[k]
        mask[i, :n] = 1.0
    batch = Episodes(*(torch.from_numpy(padded[k]) for k in ("obs", "actions", "rewards")), torch.from_numpy(mask))
    expected = MamlTrpo(cfg, model).adapted(batch)
    moved = 0.0
    for name, value in expected.items():
        np.testing.assert_allclose(adapted.state[name], value.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
        moved = max(moved, float(np.abs(value.numpy() - policy.state[name]).max()))
    assert moved > 1e-3  # the step did move the parameters
    obs = rng.standard_normal((5, 6)).astype(np.float32)
    assert not np.allclose(adapted.act(obs)[0], policy.act(obs)[0])
    with pytest.raises(ValueError, match="has no adaptation step"):
        as_policy(trained_like(*CASES["mlp_box"]), Cfg(), BOX, 6).adapt(episodes)


def test_maml_policy_adapts_on_a_held_out_task_of_its_run():
    """make_env(task=k) for a run without a schedule is test task k of the run's split (as MAML's meta-test draws
    it); collect + adapt there give a policy that acts otherwise."""
    from appo.envs import make_env
    from appo.envs.meta.tasks import task_family, task_split

    cfg = Cfg(env="navigation2d", algo="maml_trpo", task_schedule="none", maml_mlp_layers=[8])
    space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    torch.manual_seed(0)
    model = make_model(cfg, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32), space)
    policy = as_policy(model, cfg, space, 2)
    policy.meta["cfg"] = {"env": "navigation2d", "algo": "maml_trpo", "task_schedule": "none", "seed": 4}
    env = policy.make_env(task=3)
    expected = task_split(make_env("navigation2d"), Cfg.num_train_tasks, Cfg.num_test_tasks, 4)[1][3]
    assert task_family(env).get_task() == expected
    episodes = policy.collect(env, 4, seed=0)
    assert len(episodes) == 4 and all(len(e["rewards"]) == len(e["obs"]) == len(e["actions"]) for e in episodes)
    adapted = policy.adapt(episodes)
    obs = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    assert not np.allclose(adapted.act(obs)[0], policy.act(obs)[0])
    env.close()
