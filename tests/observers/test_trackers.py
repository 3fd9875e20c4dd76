"""Experiment trackers: W&B (offline) and MLflow (a local store in a temporary directory).

What each run recorded is read back through each library's own interfaces: MLflow's
``MlflowClient``, and W&B's transaction log parsed into wandb's own protobuf records
(``tests/wandb_records.py``). Nothing is sent anywhere.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from beyondfit import BeyondfitError
from beyondfit.cli.builders import build_loggers
from beyondfit.cli.run import CONF_DIR, run

from kit import cli, line_batches, line_engine

HERE = Path(__file__).resolve().parent


def tracker_env(tmp_path: Path) -> dict[str, str]:
    """W&B offline with its caches in ``tmp_path``; MLflow's file store in ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "MLFLOW_"))}
    env.update(
        WANDB_MODE="offline",
        WANDB_DATA_DIR=str(tmp_path / "wandb-data"),
        WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"),
        WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"),
        MLFLOW_TRACKING_URI=(tmp_path / "mlruns").as_uri(),
        MLFLOW_ALLOW_FILE_STORE="true",  # MLflow 3 asks for a database store otherwise
    )
    return env


@pytest.fixture
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The same settings for in-process runs."""
    env = tracker_env(tmp_path)
    for key in [k for k in os.environ if k.startswith(("WANDB_", "MLFLOW_"))]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        if key.startswith(("WANDB_", "MLFLOW_")):
            monkeypatch.setenv(key, value)
    return env


def logged_values(run_dir: Path) -> list[tuple[str, int, float]]:
    """Every value of every row of ``metrics.jsonl``: ``(name, step, value)``."""
    found = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for name, value in row.items():
            if name not in ("kind", "epoch", "step") and value is not None:
                found.append((name, row["step"], value))
    return found


def mlflow_runs(uri: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("beyondfit")
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


def mlflow_history(uri: str, run_id: str, name: str) -> list[tuple[int, float]]:
    from mlflow import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, name)]


def assert_every_row_tracked(run_dir: Path, history: dict[str, list[tuple[int, float]]]) -> None:
    """Each logged value sits at its optimizer step, and no step holds a name twice."""
    for name, step, value in logged_values(run_dir):
        at_step = [v for s, v in history.get(name, []) if s == step]
        assert at_step, f"{name} at step {step} was not tracked"
        assert at_step[-1] == pytest.approx(value, rel=1e-6), (name, step)
    for name, points in history.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{name} tracked twice at one step"


@pytest.mark.e2e
# ---------------------------------------------------------------------- MLflow
def test_mlflow_records_config_every_row_and_the_plots(tmp_path: Path, tracking) -> None:
    pytest.importorskip("mlflow")
    env = tracking
    result = cli("+task=regression", "logger=[csv,mlflow]", "train.epochs=3",
                 "engine.log_every=5", "hydra.run.dir=run", cwd=tmp_path, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert (run_dir / "metrics.csv").is_file()  # csv still written beside the tracker
    (tracked,) = mlflow_runs(env["MLFLOW_TRACKING_URI"])
    assert tracked.info.status == "FINISHED"
    assert tracked.info.run_name == "run"
    assert tracked.data.tags["beyondfit.run_dir"] == str(run_dir)
    params = tracked.data.params
    # The resolved config: interpolations followed, every section flattened.
    assert params["optimizer.lr"] == "0.002" and params["train.epochs"] == "3"  # AdamW default
    assert params["task.seed"] == "0" and params["engine.log_every"] == "5"
    assert params["task._target_"] == "beyondfit.tasks.regression.build"
    assert params["logger.mlflow.experiment"] == "beyondfit"
    assert "resume" not in params
    names = {"loss", "val_loss", "val_r2", "lr"}
    assert names <= set(tracked.data.metrics)
    history = {n: mlflow_history(env["MLFLOW_TRACKING_URI"], tracked.info.run_id, n)
               for n in names}  # fmt: skip
    assert_every_row_tracked(run_dir, history)
    assert [s for s, _ in history["val_loss"]] == [12, 24, 36]
    assert {5, 10, 12, 15, 36} <= {s for s, _ in history["loss"]}
    # The run's result (the restored model's values) beside the curves, at the last step.
    result = json.loads((run_dir / "result.json").read_text())
    for name in ("val_loss", "val_r2"):
        final = mlflow_history(env["MLFLOW_TRACKING_URI"], tracked.info.run_id, f"final_{name}")
        assert final == [(36, pytest.approx(result["values"][name], rel=1e-6))]

    from mlflow import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    assert [a.path for a in client.list_artifacts(tracked.info.run_id)] == ["curves.png"]
    local = client.download_artifacts(tracked.info.run_id, "curves.png", str(tmp_path))
    assert Path(local).read_bytes() == (run_dir / "curves.png").read_bytes()


@pytest.mark.e2e
def test_mlflow_rl_run_sends_the_policy(tmp_path: Path, tracking) -> None:
    pytest.importorskip("mlflow")
    env = tracking
    result = cli("+task=cartpole", "logger=[mlflow]", "task.total_env_steps=1024",
                 "task.eval_episodes=2", "hydra.run.dir=run", cwd=tmp_path, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (tracked,) = mlflow_runs(env["MLFLOW_TRACKING_URI"])
    from mlflow import MlflowClient

    artifacts = [a.path for a in MlflowClient(env["MLFLOW_TRACKING_URI"]).list_artifacts(
        tracked.info.run_id)]  # fmt: skip
    assert artifacts == ["curves.png", "policy.json", "policy.pt"]
    assert tracked.data.params["task.env"] == "CartPole-v1"
    assert "val_return" in tracked.data.metrics and "episode_return" in tracked.data.metrics


def test_a_failed_run_ends_its_mlflow_run_as_failed(tmp_path: Path, tracking) -> None:
    pytest.importorskip("mlflow")
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        cfg = compose("config", overrides=[
            "+task=regression", "logger=[mlflow]", "plots=false", "optimizer=sgd",
            "optimizer.lr=1000", "train.epochs=2",
        ])  # fmt: skip
    with pytest.raises(BeyondfitError, match="non-finite loss"):
        run(cfg, tmp_path / "run")
    (tracked,) = mlflow_runs(tracking["MLFLOW_TRACKING_URI"])
    assert tracked.info.status == "FAILED"


def test_python_api_tracker_ends_at_fit_end_and_a_loaded_state_continues_it(
    tmp_path: Path, tracking
) -> None:
    pytest.importorskip("mlflow")
    from beyondfit.observers.mlflow import MLflowTracker

    uri = tracking["MLFLOW_TRACKING_URI"]
    first = MLflowTracker(tmp_path, config={"lr": 0.1, "net": {"width": 4}}, run_name="api")
    engine = line_engine([first], log_every=2)
    engine.fit(line_batches(), epochs=2)
    (tracked,) = mlflow_runs(uri)
    assert tracked.info.status == "FINISHED" and tracked.info.run_name == "api"
    assert tracked.data.params == {"lr": "0.1", "net.width": "4"}
    assert [s for s, _ in mlflow_history(uri, tracked.info.run_id, "loss")] == [2, 3, 4, 6]
    state = engine.state_dict()
    assert state["callbacks"]["MLflowTracker"] == {"run_id": tracked.info.run_id}

    # A new engine loading that state continues the same MLflow run; new keys are added.
    again = MLflowTracker(tmp_path, config={"lr": 0.2, "net": {"width": 4}, "new": 1})
    resumed = line_engine([again], log_every=2)
    resumed.load_state_dict(state)
    resumed.fit(line_batches(), epochs=3)
    (tracked,) = mlflow_runs(uri)
    assert tracked.data.params == {"lr": "0.1", "net.width": "4", "new": "1"}  # first values kept
    assert [s for s, _ in mlflow_history(uri, tracked.info.run_id, "loss")] == [2, 3, 4, 6, 8, 9]


def test_mlflow_resume_of_a_run_missing_from_the_store_says_where_to_look(
    tmp_path: Path, tracking
) -> None:
    pytest.importorskip("mlflow")
    from beyondfit.observers.mlflow import MLflowTracker

    tracker = MLflowTracker(tmp_path)
    tracker.load_state_dict({"run_id": "0123456789abcdef0123456789abcdef"})
    with pytest.raises(BeyondfitError, match=r"is not in the tracking store .*MLFLOW_TRACKING_URI"):
        tracker.on_fit_start(line_engine([], log_every=2))


@pytest.mark.e2e
# ---------------------------------------------------------------------- W&B
def test_wandb_offline_records_config_every_row_and_the_plots(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from wandb_records import offline_runs

    env = tracker_env(tmp_path)
    result = cli("+task=regression", "logger=[csv,wandb]", "train.epochs=3",
                 "engine.log_every=5", "hydra.run.dir=run", cwd=tmp_path, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = tmp_path / "run"
    (tracked,) = offline_runs(run_dir)
    assert tracked.exit_code == 0
    config = tracked.config
    assert config["optimizer"]["lr"] == 0.002 and config["train"]["epochs"] == 3
    assert config["task"]["seed"] == 0 and config["task"]["_target_"].endswith("regression.build")
    assert "resume" not in config
    history: dict[str, list[tuple[int, float]]] = {}
    for row in tracked.history:
        for name, value in row.items():
            if isinstance(value, (int, float)) and name != "step" and not name.startswith("_"):
                history.setdefault(name, []).append((row["step"], value))
    assert {"loss", "val_loss", "val_r2", "lr"} <= set(history)
    assert_every_row_tracked(run_dir, history)
    assert [s for s, _ in history["val_loss"]] == [12, 24, 36]
    # The plots: an image in the run's media and a file of its artifact.
    assert [(name, kind, paths) for name, kind, paths in tracked.artifacts] == [
        (f"run-{tracked.run_id}-files", "run-files", ["curves.png"])
    ]
    (image_row,) = [r for r in tracked.history if "plots/curves/path" in r]
    media = next(run_dir.glob("wandb/offline-run-*")) / "files" / image_row["plots/curves/path"]
    assert media.read_bytes() == (run_dir / "curves.png").read_bytes()
    assert image_row["step"] == 36
    result = json.loads((run_dir / "result.json").read_text())
    for name in ("val_loss", "val_r2"):  # the run's result in its summary
        assert tracked.summary[f"final_{name}"] == pytest.approx(result["values"][name])


def test_wandb_login_problem_is_one_clear_error(tmp_path: Path, monkeypatch, tracking) -> None:
    wandb = pytest.importorskip("wandb")
    from beyondfit.observers.wandb import WandbTracker

    def refuse(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty). call wandb.login(key=...)")

    monkeypatch.setattr(wandb, "init", refuse)
    tracker = WandbTracker(tmp_path, mode="online")
    with pytest.raises(BeyondfitError, match=r"api_key not configured .*WANDB_MODE=offline"):
        tracker.on_fit_start(line_engine([], log_every=2))


# ---------------------------------------------------------------------- both, under torchrun
@pytest.mark.e2e
@pytest.mark.slow
def test_torchrun_tracks_once_from_rank_0_and_resume_continues_the_tracked_runs(
    tmp_path: Path, tracking
) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from wandb_records import offline_runs

    env = {**tracking, "OMP_NUM_THREADS": "1"}
    launched = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         "-m", "beyondfit", "+task=regression", "logger=[mlflow,wandb]", "train.epochs=2",
         "engine.log_every=2", "device=cpu", "plots=false", "hydra.run.dir=run"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr[-3000:]
    run_dir = tmp_path / "run"
    uri = env["MLFLOW_TRACKING_URI"]
    (tracked,) = mlflow_runs(uri)  # one MLflow run: rank 1 tracked nothing
    (first,) = offline_runs(run_dir)  # one W&B run
    loss = mlflow_history(uri, tracked.info.run_id, "loss")
    assert [s for s, _ in loss] == [2, 4, 6, 8, 10, 12]  # 6 steps per epoch per rank, once each

    # The run finished its budget: extending it takes resume_extend (else "already finished").
    resumed = cli("+task=regression", "logger=[mlflow,wandb]", f"resume={run_dir}",
                  "resume_extend=true", "train.epochs=3", "engine.log_every=2", "device=cpu",
                  "plots=false",
                  cwd=tmp_path, env=env)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (tracked,) = mlflow_runs(uri)  # the same MLflow run, continued
    assert tracked.info.status == "FINISHED"
    steps = [s for s, _ in mlflow_history(uri, tracked.info.run_id, "loss")]
    assert steps == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24]  # one process: 12 per epoch
    first, second = offline_runs(run_dir)  # W&B: the same run id, continued at step 12
    assert second.run_id == first.run_id
    assert min(r["step"] for r in second.history) == 14


# ---------------------------------------------------------------------- the logger group
def compose_loggers(*overrides: str):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose("config", overrides=["+task=regression", *overrides])


def test_missing_libraries_are_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("mlflow", "wandb"):
        monkeypatch.setitem(sys.modules, name, None)
        cfg = compose_loggers(f"logger=[csv,{name}]")
        with pytest.raises(BeyondfitError, match=rf'logger={name} needs the {name} package.*'
                           rf'pip install "beyondfit\[{name}\]"'):  # fmt: skip
            build_loggers(cfg, Path("unused"))


def test_bad_logger_options_name_the_key(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    cases = [
        (["logger=[wandb]", "logger.wandb.mode=sometimes"], r"logger\.wandb\.mode='sometimes'"),
        (["logger=[mlflow]", "+logger.mlflow.colour=red"],
         r"logger\.mlflow: .*MLflowTracker takes no option\(s\) colour; its options: "),
        (["logger=[mlflow]", "logger.mlflow.artifacts=['']"], r"logger\.mlflow\.artifacts="),
        (["logger=[csv]", "+logger.mine.x=1"], r"unknown logger\(s\) \['mine'\]; available: "
                                               r"csv, mlflow, tensorboard, wandb"),
        (["logger=[csv]", "+logger.mine._target_=nowhere.Logger"],
         r"logger\.mine\._target_='nowhere\.Logger': no module named 'nowhere'"),
        (["logger=[csv]", "+logger.mine._target_=builtins.dict"],
         r"logger\.mine\._target_=builtins\.dict returned dict, not a beyondfit Callback"),
    ]  # fmt: skip
    for overrides, message in cases:
        with pytest.raises(BeyondfitError, match=message):
            build_loggers(compose_loggers(*overrides), tmp_path)


@pytest.mark.e2e
def test_a_logger_of_your_own(tmp_path: Path) -> None:
    """A callback from the user's own module, named by ``_target_`` in the logger group."""
    (tmp_path / "my_logger.py").write_text(textwrap.dedent("""
        import json
        from beyondfit.core.callbacks import Callback

        class EvalLines(Callback):
            rank_zero_only = True
            def __init__(self, run_dir, config, name):
                self.path = run_dir / name
                self.lr = config["optimizer"]["lr"]
            def on_eval_end(self, engine, logs):
                row = {"step": engine.global_step, "lr": self.lr, **logs}
                with self.path.open("a") as f:
                    f.write(json.dumps(row) + "\\n")
        """))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get(
        "PYTHONPATH", "")])}  # fmt: skip
    result = cli("+task=regression", "train.epochs=2", "plots=false", "hydra.run.dir=run",
                 "+logger.evals._target_=my_logger.EvalLines", "+logger.evals.name=evals.jsonl",
                 cwd=tmp_path, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "run" / "evals.jsonl").read_text().splitlines()]
    assert [(r["step"], r["lr"]) for r in lines] == [(12, 0.002), (24, 0.002)]
    assert all(math.isfinite(r["val_loss"]) for r in lines)
    assert (tmp_path / "run" / "metrics.csv").is_file()  # beside the default csv logger


def test_shipped_loggers_name_their_callbacks() -> None:
    for name in ("csv", "tensorboard", "mlflow", "wandb"):
        section = OmegaConf.load(CONF_DIR / "logger" / f"{name}.yaml")[name]
        assert "_target_" in section, name


def test_artifact_patterns_from_the_command_line_as_the_readme_quotes_them(tmp_path) -> None:
    pytest.importorskip("mlflow")
    override = 'logger.mlflow.artifacts=["*.png","checkpoints/best.pt"]'
    cfg = compose_loggers("logger=[mlflow]", override)
    (tracker,) = build_loggers(cfg, tmp_path)
    assert tracker.artifacts == ["*.png", "checkpoints/best.pt"]
    (tmp_path / "checkpoints").mkdir()
    for name in ("curves.png", "checkpoints/best.pt", "checkpoints/step-1.pt", "notes.txt"):
        (tmp_path / name).write_text("x")
    assert tracker.artifact_files() == [tmp_path / "curves.png", tmp_path / "checkpoints/best.pt"]


def memory_tracker(run_dir: Path, fail_files: bool = False):
    """A tracker of one's own on the shared base, keeping what it was told in memory."""
    from beyondfit.observers.tracking import ExperimentTracker

    class Memory(ExperimentTracker):
        kind = "memory"

        def __init__(self) -> None:
            super().__init__(run_dir, config={"opt": {"lr": 0.1}, "resume": "x"})
            self.calls: list = []

        def start_run(self, run_id):
            self.calls.append(("start", run_id))
            return run_id or "run-1"

        def log_params(self, params, resumed):
            self.calls.append(("params", dict(params), resumed))

        def log_metrics(self, values, step):
            self.calls.append(("metrics", step, sorted(values)))

        def log_files(self, files):
            if fail_files:
                raise ConnectionError("server went away\nmore detail")
            self.calls.append(("files", [f.name for f in files]))

        def end_run(self, status):
            self.calls.append(("end", status))

    return Memory()


def test_tracker_base_logs_each_row_once_and_a_lost_server_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "curves.png").write_bytes(b"png")
    tracker = memory_tracker(tmp_path)
    line_engine([tracker], log_every=2).fit(line_batches(), epochs=2, val_data=val_batches())
    calls = tracker.calls
    assert calls[0] == ("start", None)
    assert calls[1] == ("params", {"opt.lr": 0.1}, False)  # resume is no parameter
    # log_every=2 over 3 steps an epoch: rows at 2 and 4; epoch ends at 3 and 6 (6 also a
    # log step: its epoch means are not sent twice); an evaluation at each epoch end.
    metrics = [(c[1], c[2]) for c in calls if c[0] == "metrics"]
    assert metrics == [
        (2, ["loss", "lr"]), (3, ["val_loss"]), (3, ["loss", "lr"]),
        (4, ["loss", "lr"]), (6, ["loss", "lr"]), (6, ["val_loss"]),
    ]  # fmt: skip
    assert calls[-2:] == [("files", ["curves.png"]), ("end", "finished")]

    failing = memory_tracker(tmp_path, fail_files=True)
    with caplog.at_level("WARNING", logger="beyondfit"):
        line_engine([failing], log_every=2).fit(line_batches(), epochs=1)
    assert failing.calls[-1] == ("end", "finished")  # ended all the same
    assert "memory: the run's files were not sent: server went away" in caplog.text


def val_batches() -> list:
    x = torch.linspace(-1, 1, 8).reshape(4, 2)
    return [(x, x[:, :1] * 2)]
