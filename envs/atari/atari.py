"""Atari 2600 games through ale-py (ROMs bundled since ale-py 0.9), with the standard preprocessing of DQN,
CleanRL's ppo_atari and Sample Factory: up to 30 no-ops at reset, 4 frames per step with the max of the last two,
84x84 grayscale, FIRE at reset for games that need it, and a stack of the last 4 frames: observations are uint8
(4, 84, 84), channels first. Actions: the game's minimal action set (Discrete).

Names: `atari_<game>` (e.g. atari_pong, atari_breakout; any of ale-py's ROM ids) plays without sticky actions,
like the NoFrameskip-v4 ids CleanRL and Sample Factory train on; `ALE/<Game>-v5` ids get the same preprocessing
over v5's sticky actions (repeat_action_probability 0.25, Machado et al. 2018).

Training envs (actor workers) use episodic life: losing a life ends the episode for learning (terminated, so no
value is bootstrapped past it) while the game goes on; such an end carries info["episode_continues"] and the
engine keeps counting the game's score, so the episode returns a run reports are whole games in the raw score
(rewards are clipped for learning by the preset's --reward_clip, after the score is taken). Evaluation, enjoy.py
and every other use play whole games. Video: render_mode="rgb_array" renders the 210x160 colour screen."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from appo.envs.common.episode_end import EPISODE_CONTINUES

# Frames per episode at most (27,000 agent steps at 4 frames a step): the cap of the v4/v5 ids and of CleanRL.
MAX_FRAMES = 108_000
SCORE_PREFIX = "atari_"


def rom_ids() -> list[str]:
    import ale_py.roms

    return sorted(ale_py.roms.get_all_rom_ids())


def game_of(env_name: str) -> tuple[str, float] | None:
    """(ROM id, sticky-action probability) of an Atari env name, None for any other name. ValueError (one line)
    for an atari_ name that is no game ale-py knows."""
    if env_name.startswith(SCORE_PREFIX):
        game = env_name[len(SCORE_PREFIX) :]
        sticky = 0.0
    elif env_name.startswith("ALE/") and env_name.endswith("-v5"):
        camel = env_name[len("ALE/") : -len("-v5")]
        game = "".join(("_" + c.lower()) if c.isupper() and i else c.lower() for i, c in enumerate(camel))
        sticky = 0.25
    else:
        return None
    try:
        known = rom_ids()
    except ImportError as exc:
        raise ValueError(f"--env={env_name}: Atari needs ale-py (pip install 'appo[atari]')") from exc
    if game not in known:
        close = [g for g in known if g.startswith(game[:3])][:8] or known[:8]
        raise ValueError(f"--env={env_name}: no Atari game {game!r}; ale-py has {len(known)}, e.g. {', '.join(close)}")
    return game, sticky


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (terminated, info[EPISODE_CONTINUES] = True) while the game goes on. The no-op that
    moves on from the frame where the life was lost is taken within that step, so that the step knows whether the game
    goes on: where the no-op ends the game (its last life lost with it, or the step cap landing on it), the step is the
    game's end like any other (no EPISODE_CONTINUES; truncated too where the cap ended it) and the reset that follows
    starts a new game. The reset after a lost life hands over the no-op's observation; any other reset (after game
    over, or one that cuts an episode short: a policy switch) starts a new game."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.next_life: tuple[Any, dict] | None = None  # after a lost life, the game going on: the no-op's obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = self.env.unwrapped.ale.lives()
        self.next_life = None
        if 0 < lives < self.lives and not (terminated or truncated):
            terminated = True
            next_obs, next_reward, over, cut, next_info = self.env.step(0)
            reward += next_reward  # the game's score counts it
            if over or cut:  # the game ended with the no-op: its last frame ends the step
                obs, truncated, info = next_obs, cut, next_info
            else:
                self.next_life = (next_obs, next_info)
                info = {**info, EPISODE_CONTINUES: True}
            lives = self.env.unwrapped.ale.lives()
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        if self.next_life is not None:  # the next life, from the no-op its loss took
            obs, info = self.next_life
        else:
            obs, info = self.env.reset(**kwargs)
        self.next_life = None
        self.lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE (then the next action, as the Baselines wrapper does) at the start of every game, for games that
    wait for it (Breakout's ball, ...); without it an untrained policy can idle through a whole game. After a lost
    life the policy presses FIRE itself, as in evaluation's whole games and in ale-py's vector env."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                self.env.reset(**kwargs)
        return obs, info


def needs_fire(env: gym.Env) -> bool:
    meanings = env.unwrapped.get_action_meanings()
    return len(meanings) >= 3 and meanings[1] == "FIRE"


def make_atari(
    game: str,
    sticky: float = 0.0,
    episodic_life: bool = False,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    stack: int = 4,
    fire_reset: bool = True,
    max_episode_steps: int = 0,
    render_mode: str | None = None,
) -> gym.Env:
    """The preprocessed game `game` (a ROM id). `max_episode_steps` > 0 caps a game at that many agent steps
    (counted from the policy's first action, as ale-py's vector env counts them); the frame cap MAX_FRAMES holds
    besides."""
    import ale_py

    env: gym.Env = ale_py.AtariEnv(
        game=game,
        frameskip=1,
        repeat_action_probability=sticky,
        full_action_space=False,
        max_num_frames_per_episode=MAX_FRAMES,
        render_mode=render_mode,
    )
    env = gym.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size, grayscale_obs=True
    )
    if fire_reset and needs_fire(env):
        env = FireReset(env)
    if max_episode_steps > 0:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    if episodic_life:
        env = EpisodicLife(env)
    env = gym.wrappers.FrameStackObservation(env, stack)
    return env


def atari_env(env_name: str, max_episode_steps: int = 0, **kwargs: Any) -> gym.Env | None:
    """`make_atari` for an Atari env name (see `game_of`), None for any other name."""
    found = game_of(env_name)
    if found is None:
        return None
    game, sticky = found
    return make_atari(game, sticky=sticky, max_episode_steps=max_episode_steps, **kwargs)


def make_atari_vector(
    env_name: str, num_envs: int, episodic_life: bool = False, num_threads: int = 1, max_episode_steps: int = 0
) -> Any:
    """ale-py's native AtariVectorEnv (C++ threads) of `num_envs` games of `env_name` with the preprocessing of
    `make_atari`, auto-resetting in the same step (info["final_obs"] holds a finished episode's last observation).
    With `episodic_life` a lost life comes back as terminated while the game goes on (ale-py's life_loss_info);
    the caller tells it from game over by the frame at which the game began (info["frame_number"] -
    info["episode_frame_number"]: a game over's reset begins a new one). One difference from `make_atari`'s
    wrappers: the frame stack starts from zeros instead of the first frame repeated."""
    from ale_py.vector_env import AtariVectorEnv

    game, sticky = game_of(env_name)  # type: ignore[misc]
    max_frames = MAX_FRAMES if max_episode_steps <= 0 else max_episode_steps * 4
    return AtariVectorEnv(
        game,
        num_envs,
        num_threads=num_threads,
        repeat_action_probability=sticky,
        max_num_frames_per_episode=max_frames,
        autoreset_mode="SameStep",
        reward_clipping=False,
        episodic_life=False,
        life_loss_info=episodic_life,
        use_fire_reset=True,
        noop_max=30,
    )
