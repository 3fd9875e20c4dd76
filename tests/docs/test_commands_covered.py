"""Every command of the README and every shipped preset is run by some test.

A test that runs one declares it: ``@pytest.mark.runs("python -m beyondfit +task=acrobot")``
(the line as :func:`kit.readme_commands` gives it) or ``@pytest.mark.runs("conf/algo/a2c.yaml")``
(a preset). The arguments may be string literals or names of module-level tuples, lists or
dicts of them (``*CASES``: a dict's keys). This test reads the declarations from the test
files' source (no test is imported or run), and fails when a README command or a preset is
declared by none, or when a declaration names a command the README no longer has.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kit import ROOT, readme_commands

TESTS = Path(__file__).resolve().parents[1]

#: README lines no test can run here, and why. Each is still checked to be in the README.
NOT_RUNNABLE = {
    'pip install -e ".[dev]" && python -m pytest -m "not slow" -n 2 --dist worksteal':
        "the test suite itself",
    'python -m pytest -m "not e2e and not slow" -n 2 --dist worksteal': "the unit tests themselves",
    "pip install torch --index-url https://download.pytorch.org/whl/cpu":
        "installs a package from PyTorch's index (not reachable here; .ci/run pins torch)",
    'pip install -e ".[box2d]"': "installs a package",
    'pip install -e ".[mujoco]"': "installs a package",
    'pip install -e ".[atari,minatar]"': "installs a package",
    "pip install hydra-submitit-launcher": "installs a package",
    "tensorboard --logdir outputs": "a server that runs until stopped",
    "torchrun --standalone --nproc_per_node=4 -m beyondfit +task=regression device=cuda":
        "needs 4 GPUs",
    "torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=node0:29500 "
    "--rdzv_id=exp42 -m beyondfit +task=regression device=cuda "
    "hydra.run.dir=/shared/runs/exp42": "needs 2 nodes of 8 GPUs",
    'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)': "needs SLURM",
    'srun --ntasks-per-node=1 torchrun --nnodes="$SLURM_NNODES" --nproc_per_node=8 '
    '--rdzv_backend=c10d --rdzv_endpoint="$head:29500" --rdzv_id="$SLURM_JOB_ID" -m beyondfit '
    '+task=regression device=cuda hydra.run.dir="/shared/runs/$SLURM_JOB_ID"': "needs SLURM",
    "python -m beyondfit -m +task=cartpole seed=0,1,2,3 algo=a2c,ppo "
    "hydra/launcher=submitit_slurm hydra.launcher.partition=gpu hydra.launcher.gpus_per_node=1 "
    "hydra.launcher.cpus_per_task=4 hydra.launcher.mem_gb=16 hydra.launcher.timeout_min=60 "
    "hydra.sweep.dir=multirun/cartpole-slurm device=cuda": "needs SLURM",
}


def presets() -> list[str]:
    """The shipped presets: each search, algo, task, experiment (tuned ones too), debug and
    base config."""
    groups = ("search", "algo", "task", "experiment", "experiment/tuned", "debug", "base")
    return sorted(
        str(p.relative_to(ROOT)) for group in groups for p in (ROOT / "conf" / group).glob("*.yaml")
    )


def _constants(tree: ast.Module) -> dict[str, object]:
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if not isinstance(target, ast.Name):
                continue
            if isinstance(node.value, ast.Dict):  # its keys: the values may name constants
                found[target.id] = [ast.literal_eval(k) for k in node.value.keys if k is not None]
                continue
            try:
                found[target.id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return found


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [k for k in value if isinstance(k, str)]
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str)]
    return []


def declared() -> dict[str, list[str]]:
    """Each declared command or preset -> the tests (``file::name``) that declare it."""
    runs: dict[str, list[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        constants = _constants(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for decorator in node.decorator_list:
                if not (isinstance(decorator, ast.Call) and ast.unparse(decorator.func)
                        == "pytest.mark.runs"):
                    continue
                for arg in decorator.args:
                    inner = arg.value if isinstance(arg, ast.Starred) else arg
                    if isinstance(inner, ast.Name):
                        values = _strings(constants.get(inner.id))
                    else:
                        values = _strings(ast.literal_eval(inner))
                    for value in values:
                        runs.setdefault(value, []).append(f"{path.name}::{node.name}")
    return runs


def test_every_readme_command_and_preset_is_run_by_a_test() -> None:
    commands = readme_commands()
    assert len(commands) > 40  # the parser found the blocks
    runs = declared()
    missing = [c for c in commands if c not in runs and c not in NOT_RUNNABLE]
    assert not missing, "README commands no test runs (declare with @pytest.mark.runs):\n" + (
        "\n".join(missing))
    unrun = [p for p in presets() if p not in runs]
    assert not unrun, f"presets no test runs: {unrun}"


def test_every_declaration_names_a_command_the_readme_has() -> None:
    commands, shipped = set(readme_commands()), set(presets())
    stale = sorted(d for d in declared() if d not in commands and d not in shipped)
    assert not stale, f"declared but neither a README command nor a preset: {stale}"
    gone = sorted(c for c in NOT_RUNNABLE if c not in commands)
    assert not gone, f"NOT_RUNNABLE lines the README no longer has: {gone}"


#: bench/ files the smoke tests cannot run, and why.
BENCH_NOT_RUNNABLE = {
    "gpu_check.sh": "needs a GPU (run by hand on one)",
    "class_tables.py": "not a script: bench/tabular.py's generated tables (run through it)",
    "cleanrl_sac.py": "not a script: offpolicy_update.py's hand-written loop (run through it)",
}


def test_every_bench_script_is_run_by_the_smoke_tests() -> None:
    smoke = "".join(p.read_text() for p in sorted(TESTS.rglob("test_bench*.py")))
    scripts = sorted(p.name for p in (ROOT / "bench").iterdir()
                     if p.suffix in (".py", ".sh") and p.name not in BENCH_NOT_RUNNABLE)
    unrun = [name for name in scripts
             if f'load("{Path(name).stem}")' not in smoke and f'"{name}"' not in smoke]
    assert not unrun, f"bench scripts tests/bench/test_bench_smoke.py does not run: {unrun}"
