"""training/train.py: the local CPU run really trains, and cluster mode's env parsing and Ray wiring are right.

train.py imports nothing from the package (it is mounted alone from a ConfigMap), so it is loaded by path, as a script.
Nothing here needs Ray; the local training run needs jax (requirements-train.txt).
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

TRAIN_PY = Path(__file__).resolve().parent.parent / "tpu_fallback" / "training" / "train.py"

GOOD_ENV = {
    "TPU_FALLBACK_NUM_WORKERS": "8",
    "TPU_FALLBACK_CHIPS_PER_WORKER": "4",
    "TPU_FALLBACK_TOPOLOGY": "4x8",
    "TPU_FALLBACK_ACCELERATOR_TYPE": "TPU-V6E",
}
ALL_VARS = [*GOOD_ENV, "TPU_FALLBACK_EPOCHS", "TPU_FALLBACK_LEARNING_RATE"]


def load_train() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("tpu_fallback_train", TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def train() -> types.ModuleType:
    return load_train()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A clean slate: none of the TPU_FALLBACK_* variables leak in from the caller's environment."""
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def set_env(mp: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for name, value in values.items():
        mp.setenv(name, value)


def test_local_run_trains_and_loss_falls() -> None:
    pytest.importorskip("jax", reason="install requirements-train.txt to run train.py --local")
    proc = subprocess.run(
        [sys.executable, str(TRAIN_PY), "--local", "--epochs", "30"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    epochs = [int(e) for e in re.findall(r"^Epoch (\d+): Loss \S+$", proc.stdout, re.MULTILINE)]
    losses = [float(v) for v in re.findall(r"^Epoch \d+: Loss (\S+)$", proc.stdout, re.MULTILINE)]
    assert epochs == list(range(30)), proc.stdout
    assert all(later < earlier for earlier, later in itertools.pairwise(losses)), losses
    assert losses[-1] < losses[0] / 100, losses  # it converges, not just wobbles downwards
    assert "Local Devices: [CpuDevice" in proc.stdout
    summary = proc.stdout.strip().splitlines()[-1]
    assert summary == f"Loss fell: first {losses[0]:.6g}, final {losses[-1]:.6g}", summary


def test_local_run_fails_when_loss_cannot_fall() -> None:
    # One epoch reports one loss, so final == first: the exit code must say "did not fall".
    pytest.importorskip("jax", reason="install requirements-train.txt to run train.py --local")
    proc = subprocess.run(
        [sys.executable, str(TRAIN_PY), "--local", "--epochs", "1"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Loss did not fall" in proc.stdout


def test_env_gives_scaling_config_kwargs(train: types.ModuleType, env: pytest.MonkeyPatch) -> None:
    set_env(env, GOOD_ENV)
    config = train.config_from_env()
    assert config.scaling_config_kwargs() == {
        "num_workers": 8,
        "resources_per_worker": {"TPU": 4},
        "use_tpu": True,
        "topology": "4x8",
        "accelerator_type": "TPU-V6E",
    }
    assert (config.train.epochs, config.train.learning_rate, config.train.report_every) == (50, 0.1, 10)


def test_optional_env_overrides_training(train: types.ModuleType, env: pytest.MonkeyPatch) -> None:
    set_env(env, {**GOOD_ENV, "TPU_FALLBACK_EPOCHS": "7", "TPU_FALLBACK_LEARNING_RATE": "0.05"})
    config = train.config_from_env()
    assert (config.train.epochs, config.train.learning_rate) == (7, 0.05)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"TPU_FALLBACK_NUM_WORKERS": None}, ["TPU_FALLBACK_NUM_WORKERS is not set"]),
        ({"TPU_FALLBACK_NUM_WORKERS": "four"}, ["TPU_FALLBACK_NUM_WORKERS='four'", "positive integer"]),
        ({"TPU_FALLBACK_NUM_WORKERS": "0"}, ["TPU_FALLBACK_NUM_WORKERS='0'", "positive integer"]),
        ({"TPU_FALLBACK_CHIPS_PER_WORKER": "4.0"}, ["TPU_FALLBACK_CHIPS_PER_WORKER='4.0'"]),
        ({"TPU_FALLBACK_TOPOLOGY": None}, ["TPU_FALLBACK_TOPOLOGY is not set", "4x4"]),
        ({"TPU_FALLBACK_TOPOLOGY": "4by8"}, ["TPU_FALLBACK_TOPOLOGY='4by8'", "4x4"]),
        ({"TPU_FALLBACK_ACCELERATOR_TYPE": "v6e"}, ["TPU_FALLBACK_ACCELERATOR_TYPE='v6e'", "TPU-V6E"]),
        ({"TPU_FALLBACK_ACCELERATOR_TYPE": None}, ["TPU_FALLBACK_ACCELERATOR_TYPE is not set"]),
        ({"TPU_FALLBACK_EPOCHS": "-3"}, ["TPU_FALLBACK_EPOCHS='-3'", "positive integer"]),
        ({"TPU_FALLBACK_LEARNING_RATE": "fast"}, ["TPU_FALLBACK_LEARNING_RATE='fast'", "positive number"]),
        ({"TPU_FALLBACK_LEARNING_RATE": "nan"}, ["TPU_FALLBACK_LEARNING_RATE='nan'"]),
        # 6 hosts x 4 chips = 24 chips: not a whole number of 32-chip 4x8 slices.
        ({"TPU_FALLBACK_NUM_WORKERS": "6"}, ["TPU_FALLBACK_NUM_WORKERS=6", "24 chips", "TPU_FALLBACK_TOPOLOGY=4x8"]),
    ],
)
def test_bad_env_is_one_clear_error(
    train: types.ModuleType, env: pytest.MonkeyPatch, overrides: dict[str, str | None], expected: list[str]
) -> None:
    set_env(env, GOOD_ENV)
    for name, value in overrides.items():
        if value is None:
            env.delenv(name)
        else:
            env.setenv(name, value)
    with pytest.raises(train.ConfigError) as err:
        train.config_from_env()
    for text in expected:
        assert text in str(err.value)


def test_every_problem_is_named_at_once(train: types.ModuleType, env: pytest.MonkeyPatch) -> None:
    env.setenv("TPU_FALLBACK_CHIPS_PER_WORKER", "x")
    with pytest.raises(train.ConfigError) as err:
        train.config_from_env()
    message = str(err.value)
    for name in GOOD_ENV:
        assert name in message
    assert "'x'" in message


def test_cluster_main_reports_bad_env_without_traceback(
    train: types.ModuleType, env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_env(env, {**GOOD_ENV, "TPU_FALLBACK_TOPOLOGY": "huge"})
    assert train.main([]) == 2
    err = capsys.readouterr().err
    assert "TPU_FALLBACK_TOPOLOGY='huge'" in err and "Traceback" not in err


def test_module_imports_without_ray_or_jax(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import ray` / `import jax` raise ImportError.
    for name in ("ray", "ray.train", "jax", "jax.numpy"):
        monkeypatch.setitem(sys.modules, name, None)
    module = load_train()
    set_env(monkeypatch, GOOD_ENV)
    assert module.config_from_env().num_workers == 8


def test_cluster_mode_wires_jax_trainer(
    train: types.ModuleType, env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Fake ray.train / ray.train.v2.jax record what run_cluster builds; fit() runs the worker loop in-process."""
    pytest.importorskip("jax", reason="the worker loop runs jax")
    env.setenv("JAX_PLATFORMS", "cpu")
    env.setattr(train, "WORKER_LOG_FLUSH_SECONDS", 0.0)
    seen: dict[str, Any] = {"reports": []}

    class FakeScalingConfig:
        def __init__(self, **kwargs: Any) -> None:
            seen["scaling"] = kwargs

    class FakeJaxTrainer:
        def __init__(self, **kwargs: Any) -> None:
            seen["trainer"] = kwargs

        def fit(self) -> Any:
            kwargs = seen["trainer"]
            kwargs["train_loop_per_worker"](kwargs["train_loop_config"])
            return types.SimpleNamespace(metrics=seen["reports"][-1])

    ray = types.ModuleType("ray")
    ray_train = types.ModuleType("ray.train")
    ray_train.ScalingConfig = FakeScalingConfig  # type: ignore[attr-defined]
    ray_train.report = seen["reports"].append  # type: ignore[attr-defined]
    ray.train = ray_train  # type: ignore[attr-defined]
    v2 = types.ModuleType("ray.train.v2")
    v2_jax = types.ModuleType("ray.train.v2.jax")
    v2_jax.JaxTrainer = FakeJaxTrainer  # type: ignore[attr-defined]
    for name, module in [("ray", ray), ("ray.train", ray_train), ("ray.train.v2", v2), ("ray.train.v2.jax", v2_jax)]:
        env.setitem(sys.modules, name, module)

    set_env(env, {**GOOD_ENV, "TPU_FALLBACK_EPOCHS": "25"})
    assert train.main([]) == 0

    assert seen["scaling"] == train.config_from_env().scaling_config_kwargs()
    assert isinstance(seen["trainer"]["scaling_config"], FakeScalingConfig)
    assert seen["trainer"]["train_loop_config"] == {"epochs": 25, "learning_rate": 0.1, "report_every": 10}
    reports = seen["reports"]
    assert [r["epoch"] for r in reports] == [0, 10, 20, 24]  # the tutorial's every-10th, plus the last epoch
    assert reports[-1]["loss"] < reports[0]["loss"]
    assert "Run Result: {'loss':" in capsys.readouterr().out
