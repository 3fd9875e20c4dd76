"""The engine's layer: one step engine and what it needs, nothing above it.

Nothing here imports Hydra, OmegaConf, Gymnasium, matplotlib or TensorBoard, nor any of
``beyondfit.rl``, ``beyondfit.tasks``, ``beyondfit.cli`` or ``beyondfit.observers``.

The names a user composes are re-exported once, at the top level (``from beyondfit import
Engine``); everything else is imported from its module (``beyondfit.core.strategy``,
``beyondfit.core.metrics``, ``beyondfit.core.device``, ...).
"""
