"""appo: an asynchronous PPO engine (Sample Factory style) in PyTorch."""

__version__ = "0.1.0"
