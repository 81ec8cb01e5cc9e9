"""terminal-tasks: small shell tasks verified inside each rollout's own sandbox.

The env module imports atroposlib (slow); import it explicitly:
``from environments.terminal_tasks.env import TerminalTasksEnv``.
"""

from environments.terminal_tasks.tasks import DEFAULT_TASKS_PATH, TaskCheck, TerminalTask, load_tasks

__all__ = ["DEFAULT_TASKS_PATH", "TaskCheck", "TerminalTask", "load_tasks"]
