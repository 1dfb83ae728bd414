"""Multi-agent envs through whole runs of train_appo.py and enjoy.py (real processes, PettingZoo Parallel envs, a row
of the trajectory tensors per agent): PettingZoo's rock-paper-scissors on the local backend (two actor workers) and
on Ray; paddle_duel in serial mode with evaluations against its scripted opponent, then enjoy.py plays it into an
mp4; a population of two policies whose rows meet in one game; a game whose agents leave early and join late;
mpe2's world_comm, whose three kinds of agent train as one policy over padded spaces; and envs that break the
contract or whose spaces cannot be padded, which stop the run with one line naming the agent and leave no process
behind."""

from __future__ import annotations

import importlib.util
import math
import re
import time
from pathlib import Path

import imageio.v2 as imageio
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import appo
from appo.learning.checkpoint import list_checkpoints
from tests.conftest import run_script
from tests.support.ray_cluster import RayWatch, needs_ray

# PettingZoo is no dependency of the project (paddle_duel and the test games are duck-typed).
needs_pettingzoo = pytest.mark.skipif(importlib.util.find_spec("pettingzoo") is None, reason="needs pettingzoo")
RPS = ["--env=pettingzoo.classic.rps_v2:parallel_env", "--rollout=16", "--batch_size=128", "--report_interval=1"]
DUEL = ["--env=paddle_duel", "--num_workers=1", "--num_envs_per_worker=4", "--rollout=16", "--batch_size=128"]
GAMES = "tests.support.agent_games"
EPISODE_RE = re.compile(r"^episode (\d+): return (-?[\d.]+) length (\d+)$", re.MULTILINE)
RPS_ROUNDS = 15  # rps_v2's num_cycles: every agent plays every game to its end


def scalars(summaries: Path, tag: str) -> list[tuple[int, float]]:
    """(env steps, value) of every `tag` the run wrote."""
    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def train(train_dir: Path, experiment: str, *args: str, timeout: float = 120) -> Path:
    result = run_script("train_appo.py", [*args, f"--train_dir={train_dir}", f"--experiment={experiment}"], timeout)
    assert result.returncode == 0, result.stdout[-3000:]
    return train_dir / experiment


def check_rps(exp: Path, steps: int, reported: float) -> None:
    """Every agent's episode is its whole game (15 rounds), counted once: the episodes reported account for at most
    the env steps (agent steps) and the rollouts collected ahead of training, and for at least the share
    `reported` of them (the games still running at the end are missing)."""
    summaries = exp / "summaries" / "0"
    last_step, version = scalars(summaries, "train/version")[-1]
    assert last_step >= steps and version >= 10
    assert {v for _, v in scalars(summaries, "episode/length_mean")} == {float(RPS_ROUNDS)}
    count = scalars(summaries, "episode/count")[-1][1]
    assert reported * last_step <= count * RPS_ROUNDS <= 1.25 * last_step, (count, last_step)
    assert list_checkpoints(exp / "checkpoint_p0")


@needs_pettingzoo
def test_rps_trains_on_the_local_backend_with_a_row_per_agent(train_dir: Path) -> None:
    exp = train(train_dir, "rps", *RPS, "--num_workers=2", "--num_envs_per_worker=4", "--train_for_env_steps=20000")
    check_rps(exp, 20000, reported=0.85)


@needs_ray
@needs_pettingzoo
@pytest.mark.timeout(180)
@pytest.mark.slow
def test_rps_trains_on_a_private_ray_instance_and_leaves_no_ray_process(train_dir: Path) -> None:
    from tests.integration.test_ray_backend import ACTOR_LINE, Run

    ray = RayWatch()
    flags = [*RPS, "--backend=ray", "--num_workers=2", "--num_envs_per_worker=4", "--ray_object_store_mb=100"]
    with Run(train_dir, [*flags, "--train_for_env_steps=20000"], env=ray.env) as run:
        run.wait_for(ACTOR_LINE.pattern, timeout=90, count=2)
        assert ray.look(), "no Ray process of the run seen while it trains"
        status = run.finish(timeout=150)
    assert status == 0, run.output()
    check_rps(train_dir / "run", 20000, reported=0.85)
    deadline = time.monotonic() + 5
    while (left := ray.alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left: {left}"


@pytest.fixture(scope="module")
def duel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """paddle_duel trained in serial mode, self-play with one policy, evaluated against the scripted tracker."""
    train_dir = tmp_path_factory.mktemp("duel") / "train_dir"
    args = [*DUEL, "--serial_mode", "--train_for_env_steps=20000", "--eval_interval=10000", "--eval_episodes=4"]
    return train(train_dir, "duel", *args, "--report_interval=1")


def test_paddle_duel_self_play_in_serial_mode_reports_both_sides_and_evaluates(duel: Path) -> None:
    summaries = duel / "summaries" / "0"
    assert scalars(summaries, "train/version")[-1][1] >= 50
    # Zero-sum self-play: a game's winner and loser end at the same step and both are reported, so the returns the
    # run reports always sum to zero (a lost side, or a game counted twice, would show).
    returns = scalars(summaries, "episode/return_mean")
    assert returns and all(v == 0.0 for _, v in returns), returns
    lengths = [v for _, v in scalars(summaries, "episode/length_mean")]
    assert all(10 <= v <= 400 for v in lengths), lengths  # a rally: the ball crosses the court, within max_steps
    # Evaluations play the policy against the tracker: a game is won (+1), lost (-1) or drawn (0).
    evals = scalars(summaries, "eval/return_mean")
    assert len(evals) >= 2 and evals[-1][0] >= 20000
    assert all(-1.0 <= v <= 1.0 for _, v in evals), evals
    assert len(list_checkpoints(duel / "checkpoint_p0")) >= 1


def test_enjoy_plays_paddle_duel_against_the_tracker_into_an_mp4(duel: Path) -> None:
    args = [f"--train_dir={duel.parent}", f"--experiment={duel.name}", "--save_video", "--max_num_episodes=2"]
    result = run_script("enjoy.py", args, timeout=60)
    assert result.returncode == 0, result.stdout[-3000:]
    episodes = EPISODE_RE.findall(result.stdout)
    assert [int(i) for i, _, _ in episodes] == [0, 1], result.stdout[-3000:]
    assert all(float(r) in (-1.0, 0.0, 1.0) and 1 <= int(n) <= 400 for _, r, n in episodes), episodes
    (video,) = (duel / "videos").glob("*.mp4")
    assert f"video: {video}" in result.stdout
    reader = imageio.get_reader(video, format="FFMPEG")
    try:
        shapes = [frame.shape for frame in reader]
    finally:
        reader.close()
    # Each game: the frame after its reset, then one per step.
    assert len(shapes) == sum(int(n) + 1 for _, _, n in episodes), (len(shapes), episodes)
    assert len(set(shapes)) == 1 and shapes[0][2] == 3


def test_load_policy_evaluates_the_games_enjoy_plays(duel: Path) -> None:
    """`appo.load_policy(run).evaluate` plays the games enjoy.py plays: the first seeded with the run's seed, the
    next ones going on from the env's generator, the sides alternating."""
    args = [f"--train_dir={duel.parent}", f"--experiment={duel.name}", "--no_render", "--max_num_episodes=6"]
    result = run_script("enjoy.py", args, timeout=60)
    assert result.returncode == 0, result.stdout[-3000:]
    enjoyed = [float(r) for _, r, _ in EPISODE_RE.findall(result.stdout)]
    assert len(enjoyed) == 6
    assert appo.load_policy(duel).evaluate(episodes=6) == enjoyed


@pytest.mark.slow
def test_a_population_of_two_mixes_in_one_game_and_both_policies_train(train_dir: Path) -> None:
    exp = train(train_dir, "pop", *DUEL, "--num_policies=2", "--train_for_env_steps=20000", "--report_interval=1")
    mixed = False
    for p in (0, 1):
        summaries = exp / "summaries" / str(p)
        assert scalars(summaries, "train/version")[-1][1] >= 10, f"policy {p} did not train"
        assert scalars(summaries, "episode/count")[-1][1] >= 20, f"policy {p} reported no games"
        assert list_checkpoints(exp / f"checkpoint_p{p}"), f"policy {p} saved no checkpoint"
        # Zero-sum: games of a policy against itself add up to zero in its window of returns (both sides reported
        # together); a nonzero mean needs games where it met the other policy.
        mixed |= any(v != 0.0 for _, v in scalars(summaries, "episode/return_mean"))
    assert mixed, "no game between the two policies: each row should draw its own policy"


def test_a_game_whose_agents_leave_early_and_join_late_trains(train_dir: Path) -> None:
    """tests/support/agent_games.py LeaveJoinGame: "a" leaves after 3 steps, "c" joins after 1 or 2, "b" plays the
    whole game (5 to 7 steps): every reported episode is one agent's life in its game, and the masked steps of absent
    agents leave the losses finite."""
    args = [f"--env={GAMES}:LeaveJoinGame", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=4"]
    exp = train(train_dir, "lj", *args, "--rollout=8", "--batch_size=96", "--train_for_env_steps=30000")
    summaries = exp / "summaries" / "0"
    # Over six games (the timings' cycle) the agents live 3 ("a"), 6 ("b") and 4.5 ("c") steps on average: 4.5 a
    # life; counting the steps an agent is out of its game would make every life the game's 6.
    lengths = [v for _, v in scalars(summaries, "episode/length_mean")]
    assert lengths and all(4.2 <= v <= 4.8 for v in lengths), lengths
    assert scalars(summaries, "train/nonfinite_updates")[-1][1] == 0
    assert all(abs(v) < 1e6 for _, v in scalars(summaries, "train/value_loss"))


def test_a_sample_factory_style_env_trains_with_its_agents_leaving_and_rejoining(train_dir: Path) -> None:
    """tests/support/agent_games.py SfStyleGame (Sample Factory's contract: lists, auto-reset, info["is_active"]) on
    the local backend with two actor workers: agent_1 is inactive mid-episode, so each game reports one 6-step life
    of agent_0 and two 2-step lives of agent_1, whose returns (an action of 0 or 1 plus the step over 4 each step)
    the per-agent summaries keep apart."""
    args = [f"--env={GAMES}:SfStyleGame", "--num_workers=2", "--num_envs_per_worker=4", "--rollout=8"]
    exp = train(train_dir, "sf", *args, "--batch_size=96", "--train_for_env_steps=20000", "--report_interval=1")
    summaries = exp / "summaries" / "0"
    agent_0 = [v for _, v in scalars(summaries, "episode_by_agent/agent_0")]
    agent_1 = [v for _, v in scalars(summaries, "episode_by_agent/agent_1")]
    assert agent_0 and all(5.25 <= v <= 11.25 for v in agent_0), agent_0  # steps 1-6: 21/4 plus 0 to 6 actions
    assert agent_1 and all(0.75 <= v <= 4.75 for v in agent_1), agent_1  # steps 1-2 or 5-6
    lengths = [v for _, v in scalars(summaries, "episode/length_mean")]
    assert lengths and all(2.0 < v < 6.0 for v in lengths), lengths


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("missing_agent_game", "step() returned no reward, termination or truncation for live agent 'b'"),
        ("nan_reward_game", "agent 'b' got a non-finite reward nan"),
        ("changing_spaces_game", "agent 'c' changed its spaces during the run"),
    ],
)
@pytest.mark.slow
def test_a_contract_break_stops_the_run_with_one_line_naming_the_agent(train_dir: Path, factory: str, message: str):
    args = [f"--env={GAMES}:{factory}", "--num_workers=1", "--num_envs_per_worker=2", "--rollout=16"]
    args += ["--batch_size=96", "--train_for_env_steps=20000", f"--train_dir={train_dir}", "--experiment=bad"]
    result = run_script("train_appo.py", args, timeout=90)  # asserts that no process of the run is left
    assert result.returncode == 1, result.stdout[-3000:]
    last = [line for line in result.stdout.splitlines() if line.strip()][-1]
    assert last.endswith(f"AgentEnvError: --env={GAMES}:{factory}: {message}"), result.stdout[-3000:]
    assert "ERROR actor_worker_0" in last
    assert message in (train_dir / "bad" / "log.txt").read_text()


def test_agents_whose_spaces_cannot_be_padded_are_refused_before_the_run_with_one_line(train_dir: Path) -> None:
    args = [f"--env={GAMES}:MixedActionsGame", f"--train_dir={train_dir}", "--experiment=mixed"]
    result = run_script("train_appo.py", args, timeout=60)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stdout[-3000:]
    assert lines[0].startswith(f"error: --env={GAMES}:MixedActionsGame: agent 'c' has actions Box"), lines


@needs_pettingzoo
def test_agents_of_three_kinds_train_as_one_padded_policy_and_play_their_games(train_dir: Path) -> None:
    # mpe2's world_comm: a leader adversary (34 values, 20 actions), three adversaries (34, 5) and two good agents
    # (28, 5): one policy over rows of 34 + 3 values and 20 actions.
    env = "--env=mpe2.simple_world_comm_v3:parallel_env"
    flags = [env, "--num_workers=1", "--num_envs_per_worker=2", "--rollout=25", "--batch_size=300"]
    exp = train(train_dir, "world", *flags, "--train_for_env_steps=6000", "--value_bootstrap=False")
    assert list_checkpoints(exp / "checkpoint_p0")
    acc = EventAccumulator(str(exp / "summaries" / "0"))
    acc.Reload()
    agents = {tag.split("/")[1] for tag in acc.Tags()["scalars"] if tag.startswith("episode_by_agent/")}
    assert agents == {"leadadversary_0", "adversary_0", "adversary_1", "adversary_2", "agent_0", "agent_1"}
    groups = {tag.split("/")[1] for tag in acc.Tags()["scalars"] if tag.startswith("episode_by_group/")}
    assert groups == {"leadadversary", "adversary", "agent"}
    policy = appo.load_policy(exp)
    game = policy.make_env()
    assert game.observation_space.shape == (34 + 3,) and game.action_space.n == 20
    returns = policy.evaluate(game, episodes=2, seed=7)
    game.close()
    assert len(returns) == 2 and all(math.isfinite(r) for r in returns), returns


@needs_pettingzoo
def test_obs_agent_id_gives_each_agent_its_one_hot_through_training_and_evaluation(train_dir: Path) -> None:
    exp = train(
        train_dir,
        "ids",
        *RPS,
        "--num_workers=1",
        "--num_envs_per_worker=4",
        "--train_for_env_steps=6000",
        "--obs_agent_id",
    )
    policy = appo.load_policy(exp)
    game = policy.make_env()
    obs, active = game.reset(seed=3)
    # rps_v2: a Discrete(4) observation (one-hot), then the agent's one-hot of 2.
    assert game.observation_space.shape == (4 + 2,) and active.all()
    assert obs[:, 4:].tolist() == [[1, 0], [0, 1]] and obs[:, :4].sum(axis=1).tolist() == [1, 1]
    assert len(policy.evaluate(game, episodes=2, seed=5)) == 2
    game.close()
