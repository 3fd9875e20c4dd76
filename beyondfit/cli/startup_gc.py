"""Python's garbage collector while the command line starts: paused, then the heap frozen.

Importing torch, Hydra, Gymnasium and a task creates about a million long-lived objects and
almost no garbage, yet the cyclic collector walks everything created so far again and again
while they are being created (1.3-2.4 s of a 5 s ``+task=cartpole`` run on a CPU). The command
line pauses the collector before its imports (:func:`pause`) and, once the run is built,
collects once, freezes what is left (``gc.freeze``: never walked again, still freed by
reference counting) and switches the collector back on (:func:`resume`), so training runs
with it as usual.

Only the command line does this, once per process: in a sweep the later jobs start with the
collector on. The Python API (``Engine.fit``) leaves the collector alone.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Switch the cyclic garbage collector off for the start-up (if it is on)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """After :func:`pause`, once the run is built: collect once (a task's build may leave
    cyclic garbage, a parsed file's, which frozen would stay for the whole run), freeze what
    is left, switch the collector back on. Does nothing if :func:`pause` did not switch it
    off."""
    global _paused
    if _paused:
        _paused = False
        gc.collect()
        gc.freeze()
        gc.enable()
