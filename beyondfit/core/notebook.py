"""Progress in a Jupyter notebook: whether one is running, and the widget bar whose output
becomes plain text when the fit ends.

A notebook saved afterwards keeps each output as it was last drawn; a widget is drawn from its
state, which viewers without it (GitHub's included) do not have, so they show the bar stuck at
its first drawing, 0%. Replacing the widget's output by the bar's final text line, and closing
the widget with its children, leaves a saved notebook that reads correctly anywhere.
"""

from __future__ import annotations

import sys
from typing import Any


def in_notebook() -> bool:
    """True inside a Jupyter kernel: stdout is no terminal there, but a bar can be drawn."""
    if "ipykernel" not in sys.modules:  # never imports IPython itself
        return False
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return type(get_ipython() if get_ipython else None).__name__ == "ZMQInteractiveShell"


def has_widgets() -> bool:
    """True when tqdm can draw its ipywidgets bar (ipywidgets is installed)."""
    try:
        from tqdm.notebook import IProgress
    except ImportError:
        return False
    return IProgress is not None


def widget_bar(total: int | None, initial: int, refresh: float) -> tuple[Any, Any]:
    """A tqdm.notebook bar shown in an output that can be replaced later: the bar, and the
    display handle (``IPython.display.DisplayHandle``) of that output."""
    from IPython.display import display
    from tqdm.notebook import tqdm as notebook_tqdm

    bar = notebook_tqdm(total=total, initial=initial, unit="step", mininterval=refresh,
                        leave=True, display=False)
    handle = display(bar.container, display_id=True)
    bar.displayed = True
    return bar, handle


def close_widget(widget: Any) -> None:
    """Close an ipywidgets widget with its children, layouts and styles (``close`` alone
    leaves those open, and a saved notebook keeps the state of every open one)."""
    for child in getattr(widget, "children", ()):
        close_widget(child)
    for part in ("layout", "style"):
        owned = getattr(widget, part, None)
        if owned is not None and hasattr(owned, "close"):
            owned.close()
    widget.close()


def end_widget_bar(bar: Any, handle: Any, final: str) -> None:
    """Replace the bar's output by ``final`` (plain text), then close the bar and its widget
    (shown nowhere now: its models are let go)."""
    handle.update({"text/plain": final}, raw=True)
    bar.close()
    close_widget(bar.container)
