"""Tasks: the :class:`Task` contract, and one small module per built-in task.

Each module's ``build(...)`` returns a :class:`Task` (model, loss closure, data), never a
loop; a user's own task is a function returning the same, named by ``_target_`` in a yaml.
"""

from beyondfit.tasks.contract import Evaluator

__all__ = ["Evaluator"]
