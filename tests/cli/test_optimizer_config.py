"""The optimizer config group: ``fused`` is a speed hint that never breaks a run."""

import logging

import pytest
import torch
from omegaconf import OmegaConf

from beyondfit.cli.run import build_optimizer
from beyondfit.core.errors import BeyondfitError


class NoFusedKernel(torch.optim.SGD):
    """Stands in for an optimizer on a torch build without a fused kernel for CPU parameters."""

    def __init__(self, params, lr, fused=None):
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point "
                               "Tensors of supported devices: ['cuda']")
        super().__init__(params, lr=lr)


def params() -> list[torch.nn.Parameter]:
    return list(torch.nn.Linear(3, 2).parameters())


def build(**options):
    return build_optimizer(OmegaConf.create({"_partial_": True, **options}))(params())


def test_fused_true_builds_the_fused_implementation():
    opt = build(_target_="torch.optim.Adam", lr=1e-3, fused=True)
    assert opt.defaults["fused"] is True


def test_fused_null_is_torchs_default():
    opt = build(_target_="torch.optim.Adam", lr=1e-3, fused=None)
    assert not opt.defaults["fused"]


@pytest.mark.parametrize("target", ["torch.optim.RMSprop", f"{__name__}.NoFusedKernel"])
def test_fused_falls_back_where_there_is_no_fused_kernel(target, caplog):
    with caplog.at_level(logging.INFO, logger="beyondfit"):
        opt = build(_target_=target, lr=1e-3, fused=True)
    assert type(opt).__name__ == target.rsplit(".", 1)[1]
    assert "optimizer.fused=true is not available here" in caplog.text


def test_other_bad_options_still_fail_with_one_clear_message():
    with pytest.raises(BeyondfitError, match="optimizer options are invalid"):
        build(_target_="torch.optim.Adam", lr=1e-3, fused=True, momentum=0.9)
    from beyondfit.core.options import check_learning_rate

    with pytest.raises(BeyondfitError, match=r"optimizer.lr=0.0; it must be a number > 0"):
        check_learning_rate(0.0)  # with the config, before any builder


def test_rl_tasks_ask_for_the_fused_optimizer_and_others_can_swap_it():
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cartpole = compose("config", ["+task=cartpole"])
        swapped = compose("config", ["+task=cartpole", "optimizer=rmsprop"])
    assert cartpole.optimizer.fused is True
    opt = build_optimizer(swapped.optimizer)(params())
    assert isinstance(opt, torch.optim.RMSprop)


@pytest.mark.parametrize("choice", ["adam", "adamw", "sgd"])
def test_the_command_lines_optimizers_are_fused_by_default(choice):
    from hydra import compose, initialize_config_dir

    from beyondfit.cli.run import CONF_DIR

    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        default = compose("config", ["+task=regression", f"optimizer={choice}"])
        plain = compose("config", ["+task=regression", f"optimizer={choice}",
                                   "optimizer.fused=null"])
    assert build_optimizer(default.optimizer)(params()).defaults["fused"] is True
    assert not build_optimizer(plain.optimizer)(params()).defaults["fused"]
