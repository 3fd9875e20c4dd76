"""Test helper shared by the interrupt and resume tests: a signal sent mid-training."""

from __future__ import annotations

import os
import signal

from beyondfit import Callback, Engine


class SendSignal(Callback):
    """Sends this process ``signum`` at the end of optimizer step ``at``, as Ctrl-C would."""

    def __init__(self, at: int, signum: int = signal.SIGINT) -> None:
        self.at, self.signum = at, signum

    def on_step_end(self, engine: Engine) -> None:
        """Send the signal once the engine has counted step ``at``."""
        if engine.global_step == self.at:
            os.kill(os.getpid(), self.signum)
