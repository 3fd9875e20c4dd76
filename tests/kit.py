"""The shared test kit: command-line runners and the check of their one-line errors, a tiny
regression problem and engine, the rows of a run's metrics file, a recording callback and a
signal sender. Plain functions and classes (``from kit import ...``); ``conftest.py`` offers the
recorder as a fixture too.

Tests that start a process (a command line, torchrun, a vector env's workers) are end-to-end
tests and carry ``@pytest.mark.e2e``; ``conftest.py`` fails any other test that starts one, so
``python -m pytest -m "not e2e and not slow"`` stays the fast unit run.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from beyondfit import Callback, Engine, TensorBatches
from beyondfit.checkpoint import step_checkpoints

ROOT = Path(__file__).resolve().parent.parent


def cli(
    *args: str,
    cwd: Path | None = None,
    module: str = "beyondfit",
    exe: tuple[str, ...] | None = None,
    timeout: float = 600,
    env: Mapping[str, str] | None = None,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a command line as a user would: ``python -m MODULE ARGS`` (or ``exe ARGS``).

    The checkout is put first on ``PYTHONPATH``, so the subprocess imports this tree even from
    another directory (``cwd``) and whatever else is installed. ``python -m beyondfit`` runs in
    a process forked from a warm one (:class:`_ForkServer`) unless ``fresh`` (or ``exe``, or
    ``BEYONDFIT_TEST_FRESH=1`` in the environment) asks for a new interpreter: a test of
    start-up itself needs one.
    """
    command = [*(exe or (sys.executable, "-m", module)), *args]
    environ = dict(os.environ if env is None else env)
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), environ.get("PYTHONPATH", "")) if p
    )
    if not fresh and exe is None and module == "beyondfit" and not os.environ.get(
            "BEYONDFIT_TEST_FRESH"):
        return _ForkServer.run(command, cwd, environ, timeout)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=environ)


# The fork server's program: import what every run imports (torch, its compiler front end that
# the first optimizer pulls in, Hydra, the command line, and what many runs import at their end),
# then fork one child per request, which runs `python -m beyondfit ARGS` in its own cwd,
# environment and pipes; the server reads the pipes to their end (background processes
# included, as subprocess.run does) and answers.
_FORK_SERVER = r"""
import json, os, selectors, signal, sys, time
import torch, torch._dynamo, torch.optim, hydra, omegaconf
import beyondfit.cli.app, beyondfit.cli.run
# What many runs import at their end (the plots, the classification report's baseline, the
# metric objects, the envs), when installed: once here instead of once per run.
for name in ("matplotlib.figure", "matplotlib.backends.backend_agg", "sklearn.linear_model",
             "torchmetrics", "gymnasium", "gymnasium.envs.mujoco.mujoco_env",
             "gymnasium.envs.box2d", "beyondfit.tasks.policy_gradient",
             "beyondfit.tasks.offpolicy", "beyondfit.observers.plots"):
    try:
        __import__(name)
    except ImportError:
        pass

BASE = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
answers = os.fdopen(int(sys.argv[1]), "w")


def collect(pid, fds, timeout):
    chunks = {fd: [] for fd in fds}
    sel = selectors.DefaultSelector()
    for fd in fds:
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            return kill(pid), chunks
        for key, _ in sel.select(left):
            data = os.read(key.fd, 65536)
            if data:
                chunks[key.fd].append(data)
            else:
                sel.unregister(key.fd)
                os.close(key.fd)
    # The pipes are closed; the child may still be ending (or stuck ending): wait as long as
    # the request allows, never longer, so the test that asked always gets an answer.
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), chunks
        if time.monotonic() > deadline:
            return kill(pid), chunks
        time.sleep(0.005)


def kill(pid):
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def serve():
    for line in sys.stdin:
        request = json.loads(line)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(out_r)
            os.close(err_r)
            answers.close()
            return request, out_w, err_w
        os.close(out_w)
        os.close(err_w)
        code, chunks = collect(pid, (out_r, err_r), request["timeout"])
        text = [b"".join(chunks[fd]).decode("utf-8", "replace") for fd in (out_r, err_r)]
        answers.write(json.dumps({"code": code, "stdout": text[0], "stderr": text[1]}) + "\n")
        answers.flush()
    sys.exit(0)


# What the server imported is never freed: the children's garbage collector need not walk it
# (each full collection would, touching, and so copying, every page the fork shares).
import gc
gc.collect()
gc.freeze()
request, out_w, err_w = serve()
# The child: `python -m beyondfit ARGS` in the request's directory, environment and pipes.
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.dup2(out_w, 1)
os.dup2(err_w, 2)
for fd in (null, out_w, err_w):
    os.close(fd)
sys.stdin = open(0, closefd=False)
# A run that outlives its request shows where it was: every thread's stack on its stderr,
# which the test's failure then prints.
import faulthandler
faulthandler.dump_traceback_later(max(1.0, request["timeout"] - 5), exit=False)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
sys.path[:] = [os.getcwd(), *extra, *BASE]
sys.argv = ["beyondfit", *request["args"]]
import runpy
runpy.run_module("beyondfit", run_name="__main__", alter_sys=True)
"""


class _ForkServer:
    """One warm process per test worker that forks a child per command line (see
    :data:`_FORK_SERVER`): a run then costs its own work, not two seconds of imports."""

    process: subprocess.Popen[str] | None = None
    answers: Any = None

    @classmethod
    def run(cls, command: list[str], cwd: Path | None, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        if cls.process is None or cls.process.poll() is not None:
            cls.start()
        assert cls.process is not None and cls.process.stdin is not None
        request = {"args": command[3:], "cwd": str(Path(cwd or os.getcwd()).resolve()),
                   "env": env, "timeout": timeout}
        cls.process.stdin.write(json.dumps(request) + "\n")
        cls.process.stdin.flush()
        line = cls.answers.readline()
        if not line:
            cls.process = None
            raise RuntimeError("the test fork server died; run with BEYONDFIT_TEST_FRESH=1")
        answer = json.loads(line)
        if answer["code"] is None:
            raise AssertionError(f"{' '.join(command[1:])} ran past {timeout:g} s; its stderr "
                                 f"ends:\n{answer['stderr'][-6000:]}")
        return subprocess.CompletedProcess(command, answer["code"], answer["stdout"],
                                           answer["stderr"])

    @classmethod
    def start(cls) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        read, write = os.pipe()
        cls.process = subprocess.Popen(
            [sys.executable, "-c", _FORK_SERVER, str(write)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, text=True, env=env, pass_fds=(write,), cwd=ROOT)
        os.close(write)
        cls.answers = os.fdopen(read)


# Run in a child by cli_batch: each argument list through main(), as `python -m beyondfit ARGS`.
# BEYONDFIT_TEST_PATCH (optional) is Python run once before the cases (e.g. a full disk).
_BATCH_CHILD = r"""
import contextlib, io, json, os, sys, traceback
exec(os.environ.get("BEYONDFIT_TEST_PATCH", ""))
from hydra.core.global_hydra import GlobalHydra
from beyondfit.cli.app import main
results = []
for args in json.loads(sys.stdin.read()):
    GlobalHydra.instance().clear()
    sys.argv = ["beyondfit", *args]
    err, out = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            code = "escaped"
            traceback.print_exc(file=err)
    results.append({"code": code, "stderr": err.getvalue(), "stdout": out.getvalue()})
print("RESULTS " + json.dumps(results))
"""


def cli_batch(cases: list[list[str]], cwd: Path, patch: str = "") -> list[dict[str, Any]]:
    """Run the real command line (``beyondfit.cli.app.main``) on many argument lists in one
    child process, so each case costs its own work and not torch's and Hydra's import.

    Each result holds the exit ``code``, ``stderr`` and ``stdout`` that ``python -m beyondfit
    ARGS`` would give (for errors before or during a run; Ctrl-C needs real processes).
    """
    env = {**os.environ, "BEYONDFIT_TEST_PATCH": patch}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, "-c", _BATCH_CHILD], input=json.dumps(cases),
                          cwd=cwd, capture_output=True, text=True, timeout=900, env=env)
    marker = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
    assert marker, f"the child failed: {done.stderr[-3000:]}"
    return json.loads(marker[-1][len("RESULTS "):])


def one_line_exit_2(result: subprocess.CompletedProcess[str] | Mapping[str, Any], *needles: str,
                    lines: int = 1) -> str:
    """The command failed as a user's mistake should: exit status 2, ``lines`` short lines on
    stderr (at most; the first ``beyondfit: error: ...``), no traceback anywhere, and every
    needle in them. ``result``: a finished process, or a :func:`cli_batch` result."""
    if isinstance(result, Mapping):
        code, stderr, stdout = result["code"], result["stderr"], result["stdout"]
    else:
        code, stderr, stdout = result.returncode, result.stderr, result.stdout
    shown = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, (code, stdout[-2000:], stderr[-2000:])
    assert "Traceback" not in stderr + stdout, stderr
    assert 1 <= len(shown) <= lines, stderr
    assert all(len(line) <= 400 for line in shown), stderr  # never a dump of a file's bytes
    # The error line; a warning before it is on stderr too (diagnostics never go to stdout).
    assert shown[0].startswith(("beyondfit: error: ", "WARNING: ")), stderr
    assert shown[-1].startswith("beyondfit: error: "), stderr
    for needle in needles:
        assert needle in stderr, (needle, stderr)
    return stderr


def rows(run_dir: Path, *, timeless: bool = False) -> list[dict[str, Any]]:
    """The rows of ``run_dir/metrics.jsonl``; ``timeless`` drops the wall-clock figures (which
    differ between any two runs) so that two runs' rows compare equal."""
    text = (run_dir / "metrics.jsonl").read_text()
    found = [json.loads(line) for line in text.splitlines()]
    if timeless:
        clock = re.compile(r"time|per_s|sps|elapsed")
        found = [{k: v for k, v in row.items() if not clock.search(k)} for row in found]
    return found


def sum_data(n: int = 128, d: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A tiny regression problem: ``y = x.sum(1)`` for Gaussian ``x`` of shape ``(n, d)``."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    return x, x.sum(1, keepdim=True)


def mse(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The plainest loss closure: mean squared error of ``model(x)`` against ``y``, in fp32."""
    x, y = batch
    return ((model(x).float() - y) ** 2).mean()


def gan_d_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]
               ) -> dict[str, torch.Tensor]:  # fmt: skip
    """A GAN's discriminator loss for a model with a generator ``g`` and a discriminator ``d``
    over ``(real, z)`` batches: real against the generator's detached fakes, logging the mean
    probability ``d`` gives the real rows."""
    real, z = batch
    fake = model.g(z).detach()
    real_logit, fake_logit = model.d(real), model.d(fake)
    loss = (F.binary_cross_entropy_with_logits(real_logit, torch.ones_like(real_logit))
            + F.binary_cross_entropy_with_logits(fake_logit, torch.zeros_like(fake_logit)))
    return {"loss": loss, "real": torch.sigmoid(real_logit).mean()}


def mlp(d_in: int = 4, hidden: int = 16, *, act: type[nn.Module] = nn.ReLU,
        dropout: float = 0.0) -> nn.Sequential:
    """A one-hidden-layer regressor ``d_in -> hidden -> 1``."""
    layers: list[nn.Module] = [nn.Linear(d_in, hidden), act()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    return nn.Sequential(*layers, nn.Linear(hidden, 1))


def sum_batches(n: int = 40, d: int = 4, *, square: bool = False, batch_size: int = 8
                ) -> TensorBatches:
    """:func:`sum_data` (of ``x**2`` when ``square``) as shuffled batches (data seed 0)."""
    x, y = sum_data(n, d)
    return TensorBatches(x, x.pow(2).sum(1, keepdim=True) if square else y,
                         batch_size=batch_size, seed=0)


def make_engine(model: Callable[[], nn.Module] = mlp, loss_fn: Callable[..., Any] = mse, *,
                optimizer: Callable[..., torch.optim.Optimizer] = torch.optim.Adam,
                lr: float = 1e-2, callbacks: Iterable[Callback] = (), **options: Any) -> Engine:
    """A CPU engine, the same on every call: torch's seed 0, then ``model()`` and
    ``optimizer(params, lr)``; ``options`` go to :class:`Engine`."""
    torch.manual_seed(0)
    net = model()
    return Engine(net, loss_fn, optimizer(net.parameters(), lr), device="cpu",
                  callbacks=list(callbacks), **options)


def bench_script(name: str) -> Any:
    """``bench/NAME.py`` imported as module ``bench_NAME`` (the scripts are no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def task_config(task: str, *overrides: str) -> Any:
    """The config ``python -m beyondfit +task=TASK OVERRIDES...`` composes (Hydra's compose)."""
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(config_name="config", overrides=[f"+task={task}", *overrides])


def line_engine(callbacks: Iterable[Callback] = (), log_every: int = 100) -> Engine:
    """A ``Linear(2, 1)`` engine fitting :func:`line_batches` by SGD (observers' tests)."""
    return make_engine(lambda: nn.Linear(2, 1), mse, optimizer=torch.optim.SGD, lr=0.1,
                       callbacks=callbacks, log_every=log_every)


def line_batches() -> TensorBatches:
    """12 points of ``y = 2 x_0`` in batches of 4 (three steps an epoch)."""
    x = torch.linspace(-1, 1, 24).reshape(12, 2)
    return TensorBatches(x, x[:, :1] * 2, batch_size=4, seed=0)


class Recorder(Callback):
    """Keeps every ``on_log`` row, every evaluation and every epoch row, as plain dicts."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []
        self.evals: list[dict[str, float]] = []
        self.epochs: list[dict[str, float]] = []

    def on_log(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Record a running row."""
        self.logs.append(dict(logs))

    def on_eval_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Record an evaluation."""
        self.evals.append(dict(logs))

    def on_epoch_end(self, engine: Engine, logs: Mapping[str, float]) -> None:
        """Record an epoch row."""
        self.epochs.append(dict(logs))


class SendSignal(Callback):
    """Sends this process ``signum`` at the end of optimizer step ``at``, as Ctrl-C would."""

    def __init__(self, at: int, signum: int = signal.SIGINT) -> None:
        self.at, self.signum = at, signum

    def on_step_end(self, engine: Engine) -> None:
        """Send the signal once the engine has counted step ``at``."""
        if engine.global_step == self.at:
            os.kill(os.getpid(), self.signum)


#: The source of a user's own env module (``myenvs.py``): a 5-cell corridor, Discrete actions.
#: Tests append their own registration (and wrappers) to it.
CORRIDOR_ENV = '''
import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Start at 0 of 0..4; right/left; +1 for each step spent at 4."""

    observation_space = gym.spaces.Box(0.0, 4.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x = 0
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x = min(4, max(0, self.x + (1 if action == 1 else -1)))
        return np.array([self.x], np.float32), float(self.x == 4), False, False, {}
'''


def doc_pages() -> list[Path]:
    """The documentation a user reads: the README, CONTRIBUTING.md and every page of the site."""
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def docs_text() -> str:
    """All of :func:`doc_pages`, one after another."""
    return "\n\n".join(page.read_text() for page in doc_pages())


def doc_section(heading: str) -> str:
    """The section under ``heading`` (its title, with or without the ``#`` marks) in whichever
    page has it: from the heading to the next heading of the same or a higher level."""
    title = heading.lstrip("#").strip()
    for page in doc_pages():
        lines, fence, start, level = page.read_text().splitlines(), False, None, 0
        for i, line in enumerate(lines):
            if line.startswith("```"):
                fence = not fence
            match = None if fence else re.match(r"^(#{1,6}) (.*)$", line)
            if not match:
                continue
            if start is None and match.group(2).strip() == title:
                start, level = i, len(match.group(1))
            elif start is not None and len(match.group(1)) <= level:
                return "\n".join(lines[start:i]) + "\n"
        if start is not None:
            return "\n".join(lines[start:]) + "\n"
    raise AssertionError(f"no page of the documentation has the heading {title!r}")


def readme_block(heading: str, kind: str) -> str:
    """The first ```KIND code block of the documentation's section under ``heading``, as a
    user copies it."""
    body = doc_section(heading).split(f"```{kind}\n", 1)[1]
    return body[: body.index("```")]


def readme_commands(text: str | None = None) -> list[str]:
    """Every command line of the documentation's fenced bash blocks (:func:`doc_pages`), as
    typed: comment lines dropped, a trailing ``  # comment`` cut, backslash continuations
    joined with one space.

    Tests that run one declare it with ``@pytest.mark.runs("the line")`` (or a shipped preset,
    ``"conf/GROUP/NAME.yaml"``); ``tests/docs/test_commands_covered.py`` checks that every one is.
    """
    text = docs_text() if text is None else text
    found: list[str] = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line and not line.startswith("#"):
                found.append(" ".join(line.split()))
    return found

# ------------------------------------------------------------ interrupting a command-line run
# Runs the real CLI with each optimizer step slowed down by STEP_DELAY seconds.
WRAPPER = """
import os, sys, time
import beyondfit.core.engine as engine_module
from beyondfit.cli.app import main
delay = float(os.environ["STEP_DELAY"])
step = engine_module.Engine.train_step
def slowed(self, batch):
    time.sleep(delay)
    return step(self, batch)
engine_module.Engine.train_step = slowed
main()
"""
QUIET = ["device=cpu", "progress.bar=false", "plots=false", "engine.log_every=1"]
SEED = int(os.environ.get("BEYONDFIT_TEST_SEED", time.time_ns() % 2**31))




def launch(args: list[str], cwd: Path, delay: float = 0.02) -> tuple[subprocess.Popen, Path]:
    """Start the CLI; returns the process and the file its stdout (the log lines) goes to."""
    env = {**os.environ, "STEP_DELAY": str(delay), "PYTHONUNBUFFERED": "1"}
    log = cwd / f"launch-{time.time_ns()}.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *args], cwd=cwd, env=env,
                                stdout=out, stderr=subprocess.PIPE, text=True)
    return proc, log


def last_step(run_dir: Path) -> int:
    """The step of the newest complete row of metrics.jsonl (0 when there is none)."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines(keepends=True)
    except FileNotFoundError:
        return 0
    for line in reversed(lines):
        if line.endswith("\n"):
            try:
                return int(json.loads(line)["step"])
            except (ValueError, KeyError):
                return 0
    return 0


def stop_at(proc: subprocess.Popen, log: Path, run_dir: Path, step: int, signum: int,
            rng: random.Random, resumed: bool) -> None:
    """Send ``signum`` once the run logged ``step`` (plus a random fraction of a step).

    A resumed run is first seen to have resumed: until then metrics.jsonl still holds rows
    the killed run wrote after its last checkpoint, which the resumed run cuts away.
    """
    deadline = time.monotonic() + 600

    def ready() -> bool:
        if resumed and "resumed from" not in log.read_text():
            return False
        return last_step(run_dir) >= step and bool(step_checkpoints(run_dir / "checkpoints"))

    while not ready():
        assert proc.poll() is None, f"the run ended before step {step}: {proc.stderr.read()}"
        assert time.monotonic() < deadline, "the run made no progress"
        time.sleep(0.003)
    time.sleep(rng.uniform(0, 0.03))  # anywhere in the step: compute, rows, checkpoint write
    assert proc.poll() is None, f"the run ended before the signal at step {step}"
    proc.send_signal(signum)


def torchrun(*args: str, cwd: Path, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc_per_node=N -m beyondfit ARGS`` (a free port each time)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc_per_node={nproc}", "-m", "beyondfit", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def killed_and_resumed(overrides: list[str], steps: int, tmp_path: Path, kill_from: int
                       ) -> tuple[dict[str, Any], dict[str, Any], str]:
    """An off-policy run killed with SIGKILL at a random step from ``kill_from`` on, then
    resumed, beside the same run uninterrupted: ``(resumed, reference, context)``, the two
    final checkpoints (of step ``steps``) once the model, counters and metrics rows were found
    equal, and the seed line for further asserts."""
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR, run
    from beyondfit.core.state.serialization import safe_load

    ref = tmp_path / "reference"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, *QUIET])
    run(cfg, ref)
    run_dir = tmp_path / "run"
    proc, log = launch([*overrides, *QUIET, f"hydra.run.dir={run_dir}"], tmp_path)
    rng = random.Random(SEED)
    stop_at(proc, log, run_dir, kill_from + rng.randrange(60), signal.SIGKILL, rng, False)
    proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGKILL
    resumed = cli(*overrides, *QUIET, f"resume={run_dir}", cwd=tmp_path)
    stderr = resumed.stderr
    assert resumed.returncode == 0, stderr
    assert "bitwise" not in stderr, stderr  # no warning that the envs could not be rebuilt
    final = f"step-{steps:08d}.pt"
    got = safe_load(run_dir / "checkpoints" / final)
    expected = safe_load(ref / "checkpoints" / final)
    context = f"seed {SEED}"
    for key, value in expected["model"].items():  # the targets' call counts included
        same = torch.equal(got["model"][key], value) if isinstance(value, torch.Tensor) \
            else got["model"][key] == value
        assert same, f"{key} differs ({context})"
    assert got["counters"] == expected["counters"], context
    assert rows(run_dir) == rows(ref), context
    return got, expected, context


def leave_rank() -> None:
    """End a process ``torch.multiprocessing.spawn`` started, once its checks passed and its
    process group is gone: without C++ teardown. Gloo's threads aborted it now and then on a
    busy machine ("terminate called without an active exception", SIGABRT) after every check
    had passed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
