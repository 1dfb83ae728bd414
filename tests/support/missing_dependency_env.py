"""An env module whose import fails the way gymnasium's own do when their package is missing (LunarLander-v3
without box2d): DependencyNotInstalled."""

from gymnasium.error import DependencyNotInstalled

raise DependencyNotInstalled("Box2D is not installed, run `pip install box2d`")
