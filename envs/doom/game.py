"""One VizDoom game as a gymnasium env (`--env=doom_<scenario>`), in Sample Factory's conventions for Doom: the game
renders small (160x120) and the screen is resized to 128x72 (uint8 RGB, channels last), every action is repeated for
4 tics (`frameskip`), and the scenario's game variables (health, ammo ...) come beside the screen as a float vector:
a Dict observation {"screen", "vars"} (the engine's Dict encoder: a convnet on the screen, an MLP on the vector), or
the screen alone where the scenario has no variables. Actions: one Discrete over the scenario's joint button
choices (envs/doom/scenarios.py).

The game starts at the first reset, not at construction (the driver builds an env to read its spaces), through
appo's launcher (envs/doom/launcher.py), so that it dies with this process. Rewards are the game's own; an episode
that reaches the scenario's time limit is truncated, one the player dies in or completes is terminated.
`render()` gives the last screen at the game's own 160x120."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

from appo.envs.doom.launcher import launcher_path
from appo.envs.doom.scenarios import SCENARIOS


class PlayerGame:
    """One player's game: `cfg` (a .cfg of vizdoom's scenarios folder) rendered at 160x120 RGB, hidden and silent, its
    buttons and game variables as the .cfg has them or as given, `args` added to the game's command line (a match's
    host or join arguments), started through appo's launcher at `start`."""

    def __init__(
        self,
        cfg: str,
        buttons: list[str] | None = None,
        variables: list[str] | None = None,
        size: tuple[int, int] = (128, 72),
        args: str = "",
        name: str = "",
    ) -> None:
        import vizdoom

        self.size = size
        self.game = vizdoom.DoomGame()
        self.game.load_config(os.path.join(vizdoom.scenarios_path, cfg))
        self.game.set_window_visible(False)
        self.game.set_sound_enabled(False)
        self.game.set_screen_resolution(vizdoom.ScreenResolution.RES_160X120)
        self.game.set_screen_format(vizdoom.ScreenFormat.RGB24)
        self.game.set_mode(vizdoom.Mode.PLAYER)
        if buttons is not None:
            self.game.set_available_buttons([vizdoom.Button.__members__[b] for b in buttons])
        if variables is not None:
            self.game.set_available_game_variables([vizdoom.GameVariable.__members__[v] for v in variables])
        if args:
            self.game.add_game_args(args)
        if name:
            self.game.add_game_args(f"+name {name}")
        self.buttons = [str(b).rpartition(".")[2] for b in self.game.get_available_buttons()]
        self.variables = [str(v).rpartition(".")[2] for v in self.game.get_available_game_variables()]
        self.started = False
        self.frame = np.zeros((120, 160, 3), np.uint8)  # the last full-size screen
        self.last_obs: Any = None

    def observation_space(self) -> gym.Space:
        width, height = self.size
        screen = gym.spaces.Box(0, 255, (height, width, 3), np.uint8)
        if not self.variables:
            return screen
        variables = gym.spaces.Box(-np.inf, np.inf, (len(self.variables),), np.float32)
        return gym.spaces.Dict({"screen": screen, "vars": variables})

    def start(self) -> None:
        import vizdoom

        self.game.set_vizdoom_path(launcher_path(os.path.join(os.path.dirname(vizdoom.__file__), "vizdoom")))
        self.game.init()
        self.started = True

    def observe(self) -> Any:
        """The observation of the game's current state; the last one again once the episode has finished."""
        import cv2

        state = self.game.get_state()
        if state is None:
            return self.last_obs
        self.frame = state.screen_buffer
        screen = cv2.resize(self.frame, self.size, interpolation=cv2.INTER_AREA)
        self.last_obs = (
            {"screen": screen, "vars": np.asarray(state.game_variables, np.float32)} if self.variables else screen
        )
        return self.last_obs

    def variable(self, name: str) -> float:
        import vizdoom

        return float(self.game.get_game_variable(vizdoom.GameVariable.__members__[name]))

    def close(self) -> None:
        if self.started:
            self.game.close()
            self.started = False


class DoomEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 35}

    def __init__(
        self,
        scenario: str,
        frameskip: int = 4,
        width: int = 128,
        height: int = 72,
        render_mode: str | None = None,
    ) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown Doom scenario {scenario!r}; known: {', '.join(sorted(SCENARIOS))}")
        self.scenario, self.frameskip = SCENARIOS[scenario], frameskip
        self.render_mode = render_mode
        self.player = PlayerGame(self.scenario.cfg, size=(width, height))
        self.game = self.player.game
        self.actions = self.scenario.actions(self.player.buttons)
        self.observation_space = self.player.observation_space()
        self.action_space = gym.spaces.Discrete(len(self.actions))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.game.set_seed(int(seed) % 2**32)
        if not self.player.started:
            self.player.start()
        self.game.new_episode()
        return self.player.observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        reward = float(self.game.make_action(self.actions[int(action)], self.frameskip))
        obs = self.player.observe()  # no state after the last tic: the last screen stands
        if self.game.is_episode_finished():
            timeout = self.game.get_episode_timeout()
            truncated = not self.game.is_player_dead() and timeout > 0 and self.game.get_episode_time() >= timeout - 1
            return obs, reward, not truncated, truncated, {}
        return obs, reward, False, False, {}

    def render(self) -> np.ndarray | None:
        return self.player.frame.copy() if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self.player.close()
