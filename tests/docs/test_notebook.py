"""``Engine.fit`` in Jupyter: one progress display, a widget bar that the notebook keeps as its
final text state (what a notebook saved afterwards shows, in any viewer), and "interrupt
kernel" stopping the fit with the engine's state kept. A small notebook runs headless
(nbclient + ipykernel).

Marked slow: starting a kernel takes a few seconds on its own (about 15 s in all here).
"""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from kit import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

CELLS = [
    # 0: a tiny regression, as a user writes it in a notebook
    """
    import json, os, signal
    import torch
    from torch import nn
    from beyondfit import Callback, Engine

    torch.manual_seed(0)
    x = torch.randn(256, 4)
    y = x.sum(1, keepdim=True)
    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 256, 16)]

    def loss_fn(model, batch):
        a, b = batch
        return ((model(a) - b) ** 2).mean()

    model = nn.Linear(4, 1)
    engine = Engine(model, loss_fn, torch.optim.SGD(model.parameters(), 0.05), device="cpu")
    kernel_handler = signal.getsignal(signal.SIGINT)
    """,
    # 1: the bar
    "history = engine.fit(batches, epochs=2)",
    # 2: "interrupt kernel" (SIGINT to the kernel process) in the middle of the third epoch
    """
    class InterruptKernel(Callback):
        def on_step_end(self, engine):
            if engine.global_step == 40:
                os.kill(os.getpid(), signal.SIGINT)

    engine.add_callback(InterruptKernel())
    engine.fit(batches, epochs=1)
    """,
    # 3: the state after the interrupt, and the fit continuing from it
    """
    stopped_at = engine.global_step
    grads = [p.grad for p in model.parameters()]
    weights = [p.detach().clone() for p in model.parameters()]
    engine.callbacks.pop()  # the interrupter
    engine.fit(batches, max_steps=16)
    print(json.dumps({
        "stopped_at": stopped_at,
        "grads_cleared": all(g is None for g in grads),
        "handler_kept": signal.getsignal(signal.SIGINT) is kernel_handler,
        "continued_to": engine.global_step,
        "weights_moved": any(not torch.equal(w, p) for w, p in zip(weights, model.parameters())),
    }))
    """,
]


WIDGET = "application/vnd.jupyter.widget-view+json"


def progress_text(outputs: list) -> str:
    """The one progress display of a cell's outputs, as plain text, checking that it is the
    only one, that it needs no widget state, and that no epoch lines were printed beside it."""
    (shown,) = [o for o in outputs if o.output_type in ("display_data", "update_display_data")]
    assert set(shown.data) == {"text/plain"}, shown.data  # the widget was replaced by its text
    printed = "".join(o.text for o in outputs if o.output_type == "stream")
    assert not re.search(r"^epoch \d", printed, flags=re.M), printed
    return shown.data["text/plain"]


@pytest.mark.slow
def test_fit_in_a_notebook_shows_one_bar_saved_as_its_final_text_and_stops_on_interrupt(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the kernel imports this checkout
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(textwrap.dedent(c).strip()) for c in CELLS]
    notebook.cells[2].metadata["tags"] = ["raises-exception"]  # the interrupt is expected
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    # Saved as a viewer without widget state shows it: no output refers to a widget model.
    nbformat.write(notebook, tmp_path / "fit.ipynb")
    saved = nbformat.read(tmp_path / "fit.ipynb", as_version=4)
    assert WIDGET not in json.dumps([cell.outputs for cell in saved.cells])
    final = progress_text(saved.cells[1].outputs)
    assert re.fullmatch(r"epoch 2/2: 100%\|█+\| 32/32 \[.*step/s, loss=[\d.e-]+\]", final), final
    stopped = progress_text(saved.cells[2].outputs)
    assert re.fullmatch(r"epoch 3/3:  83%\|.*\| 40/48 \[.*\] - interrupted", stopped), stopped
    assert re.match(r"epoch \d+: 100%\|█+\| 56/56 ", progress_text(saved.cells[3].outputs))
    interrupted = notebook.cells[2].outputs
    errors = [o.get("ename") for o in interrupted if o.output_type == "error"]
    assert errors == ["KeyboardInterrupt"]
    (printed,) = [o for o in notebook.cells[3].outputs if o.output_type == "stream"
                  and o.text.strip().startswith("{")]
    state = json.loads(printed.text.strip().splitlines()[-1])
    assert state == {"stopped_at": 40, "grads_cleared": True, "handler_kept": True,
                     "continued_to": 56, "weights_moved": True}
