"""airvisor: a supervisor for prime-rl + MLGym reinforcement-learning runs on a GPU box."""

from airvisor._version import __version__

__all__ = ["__version__"]
