"""Tasks: where prompts come from and how outputs are scored. See :mod:`harness.tasks.base`."""
from harness.tasks.base import Example, Task, load_task, register_task, task_registry

__all__ = ["Example", "Task", "load_task", "register_task", "task_registry"]
