"""hermes-console: an operations console for Atropos RL environments."""

__version__ = "0.1.0"
