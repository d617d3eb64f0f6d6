"""JAX linear regression trained with Ray Train's JaxTrainer on a Cloud TPU slice (the tutorial's script).

Cluster mode (default; what the RayJob runs as ``python /app/train.py``): the ScalingConfig comes from
environment variables that the RayJob sets from the infrastructure stack's outputs:

    TPU_FALLBACK_NUM_WORKERS        TPU hosts (Ray workers) per job, e.g. 4
    TPU_FALLBACK_CHIPS_PER_WORKER   TPU chips per host, e.g. 4  -> resources_per_worker={"TPU": n}
    TPU_FALLBACK_TOPOLOGY           slice topology, e.g. 4x4
    TPU_FALLBACK_ACCELERATOR_TYPE   Ray accelerator type, e.g. TPU-V6E
    TPU_FALLBACK_EPOCHS             optional, default 50
    TPU_FALLBACK_LEARNING_RATE      optional, default 0.1

Local mode (``python train.py --local [--epochs N]``): the same training loop in-process on the CPU with
neither Ray nor a TPU; exits 0 only if the loss fell, 2 with one line naming ./scripts/setup when jax is missing.

Ray and JAX are imported inside functions only: the module must import without Ray (tests, local mode),
and Ray's JaxTrainer docs ask that jax be imported inside the worker loop so the driver never grabs the TPU.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

ENV_NUM_WORKERS = "TPU_FALLBACK_NUM_WORKERS"
ENV_CHIPS_PER_WORKER = "TPU_FALLBACK_CHIPS_PER_WORKER"
ENV_TOPOLOGY = "TPU_FALLBACK_TOPOLOGY"
ENV_ACCELERATOR_TYPE = "TPU_FALLBACK_ACCELERATOR_TYPE"
ENV_EPOCHS = "TPU_FALLBACK_EPOCHS"
ENV_LEARNING_RATE = "TPU_FALLBACK_LEARNING_RATE"

DEFAULT_EPOCHS = 50
DEFAULT_LEARNING_RATE = 0.1
# The tutorial reports every 10th epoch on the cluster; locally every epoch is reported.
CLUSTER_REPORT_EVERY = 10
# The tutorial sleeps after training so the worker's last log lines reach the driver before Ray tears
# the worker down. Cluster mode only; a module constant so tests can set it to 0.
WORKER_LOG_FLUSH_SECONDS = 3.0

_TOPOLOGY_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")  # 2-D (v5e/v6e) or 3-D (v4/v5p)
_ACCELERATOR_RE = re.compile(r"^TPU-[A-Z0-9]+$")  # Ray's names: TPU-V6E, TPU-V5LITEPOD, TPU-V5P, TPU-V4

Metrics = dict[str, float]
Reporter = Callable[[Metrics], None]
"""Receives {"loss": ..., "epoch": ...}: ray.train.report on the cluster, a collector locally."""


class ConfigError(ValueError):
    """The environment does not describe a usable TPU slice; the message names each bad variable."""


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of the training loop (plain values: they travel to the workers as a dict)."""

    epochs: int = DEFAULT_EPOCHS
    learning_rate: float = DEFAULT_LEARNING_RATE
    report_every: int = CLUSTER_REPORT_EVERY


@dataclass(frozen=True)
class ClusterConfig:
    """Everything cluster mode reads from the environment."""

    num_workers: int
    chips_per_worker: int
    topology: str
    accelerator_type: str
    train: TrainConfig

    def scaling_config_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ray.train.ScalingConfig (Ray Train v2, use_tpu/topology are v2 fields)."""
        return {
            "num_workers": self.num_workers,
            "resources_per_worker": {"TPU": self.chips_per_worker},
            "use_tpu": True,
            "topology": self.topology,
            "accelerator_type": self.accelerator_type,
        }


def _positive_int(env: Mapping[str, str], name: str, errors: list[str], default: int | None = None) -> int:
    raw = env.get(name)
    if raw is None or (default is not None and raw.strip() == ""):
        if default is not None:
            return default
        errors.append(f"{name} is not set (expected a positive integer)")
        return 0
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if value < 1:
        errors.append(f"{name}={raw!r} is not a positive integer")
    return value


def _positive_float(env: Mapping[str, str], name: str, errors: list[str], default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        errors.append(f"{name}={raw!r} is not a positive number")
    return value


def _matching(env: Mapping[str, str], name: str, errors: list[str], pattern: re.Pattern[str], example: str) -> str:
    raw = env.get(name)
    if raw is None:
        errors.append(f"{name} is not set (expected e.g. {example})")
        return ""
    if not pattern.fullmatch(raw.strip()):
        errors.append(f"{name}={raw!r} is not valid (expected e.g. {example})")
    return raw.strip()


def config_from_env(env: Mapping[str, str] | None = None) -> ClusterConfig:
    """Read and validate the cluster-mode environment; raise one ConfigError listing every problem."""
    env = os.environ if env is None else env
    errors: list[str] = []
    num_workers = _positive_int(env, ENV_NUM_WORKERS, errors)
    chips = _positive_int(env, ENV_CHIPS_PER_WORKER, errors)
    topology = _matching(env, ENV_TOPOLOGY, errors, _TOPOLOGY_RE, "4x4 or 2x2x4")
    accelerator = _matching(env, ENV_ACCELERATOR_TYPE, errors, _ACCELERATOR_RE, "TPU-V6E")
    epochs = _positive_int(env, ENV_EPOCHS, errors, default=DEFAULT_EPOCHS)
    learning_rate = _positive_float(env, ENV_LEARNING_RATE, errors, default=DEFAULT_LEARNING_RATE)
    if not errors:
        # Ray schedules whole slices: the workers' chips must fill a whole number of slices, or the
        # placement group can never be satisfied and the job would hang instead of failing.
        slice_chips = math.prod(int(n) for n in topology.split("x"))
        if (num_workers * chips) % slice_chips:
            errors.append(
                f"{ENV_NUM_WORKERS}={num_workers} x {ENV_CHIPS_PER_WORKER}={chips} = {num_workers * chips} chips "
                f"is not a whole number of {ENV_TOPOLOGY}={topology} slices ({slice_chips} chips each)"
            )
    if errors:
        raise ConfigError("invalid training environment: " + "; ".join(errors))
    return ClusterConfig(
        num_workers=num_workers,
        chips_per_worker=chips,
        topology=topology,
        accelerator_type=accelerator,
        train=TrainConfig(epochs=epochs, learning_rate=learning_rate),
    )


def run_training(config: TrainConfig, report: Reporter) -> None:
    """The tutorial's training function, shared by both modes: only `report` differs."""
    import jax  # type: ignore[import-not-found,unused-ignore]
    import jax.numpy as jnp  # type: ignore[import-not-found,unused-ignore]

    print(f"Local Devices: {jax.local_devices()}")
    key = jax.random.PRNGKey(0)
    x = jax.random.normal(key, (1000, 10))
    w_true = jax.random.normal(key, (10, 1))  # same key as x, as in the tutorial: keeps the data identical
    y = jnp.dot(x, w_true)
    w = jnp.zeros((10, 1))
    learning_rate = config.learning_rate

    def update_step(w: Any, x: Any, y: Any) -> tuple[Any, Any]:
        y_pred = jnp.dot(x, w)
        loss = jnp.mean((y_pred - y) ** 2)
        grad = jax.grad(lambda w: jnp.mean((jnp.dot(x, w) - y) ** 2))(w)
        return w - learning_rate * grad, loss

    # jit as a call rather than a decorator: mypy --strict then needs no jax stubs when jax is absent.
    update = jax.jit(update_step)

    print("Starting training...")
    for epoch in range(config.epochs):
        w, loss = update(w, x, y)
        # Also report the last epoch, so the final loss is always seen (the tutorial's 50 epochs stop at 40).
        if epoch % config.report_every == 0 or epoch == config.epochs - 1:
            value = float(loss.item())
            report({"loss": value, "epoch": epoch})
            # .6g prints "12.3456" like the tutorial's .4f for large losses but keeps small ones distinct.
            print(f"Epoch {epoch}: Loss {value:.6g}")
    print("Training Complete!")


def _cluster_worker_loop(loop_config: dict[str, Any]) -> None:
    """train_loop_per_worker: runs on every TPU host; settings arrive via train_loop_config, not env,
    because the env vars are set on the submitting pod and need not reach the worker pods."""
    import ray.train  # type: ignore[import-not-found,import-untyped,unused-ignore]

    run_training(TrainConfig(**loop_config), report=ray.train.report)
    time.sleep(WORKER_LOG_FLUSH_SECONDS)


def run_cluster(config: ClusterConfig) -> int:
    """Cluster mode: one JaxTrainer run across the slice(s) described by `config`."""
    from ray.train import ScalingConfig  # type: ignore[import-not-found,import-untyped,unused-ignore]
    from ray.train.v2.jax import JaxTrainer  # type: ignore[import-not-found,import-untyped,unused-ignore]

    scaling_config = ScalingConfig(**config.scaling_config_kwargs())
    print(f"ScalingConfig: {config.scaling_config_kwargs()}; training: {asdict(config.train)}")
    trainer = JaxTrainer(
        train_loop_per_worker=_cluster_worker_loop,
        train_loop_config=asdict(config.train),
        scaling_config=scaling_config,
    )
    result = trainer.fit()
    print(f"Run Result: {result.metrics}")
    return 0


def run_local(epochs: int) -> int:
    """Local mode: the same loop in-process on the CPU; 0 only if the loss fell."""
    # A CPU-only run even where a TPU/GPU jaxlib is installed; an explicit JAX_PLATFORMS still wins.
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError as err:
        # ./scripts/plan installs only the runtime requirements; jax comes with the development ones.
        print(f"error: --local needs jax, which is not installed ({err}): run ./scripts/setup, which installs it "
              f"into ./venv", file=sys.stderr)
        return 2
    losses: list[float] = []
    run_training(TrainConfig(epochs=epochs, report_every=1), report=lambda metrics: losses.append(metrics["loss"]))
    if not losses:
        print("No loss was reported", file=sys.stderr)
        return 1
    first, final = losses[0], losses[-1]
    fell = final < first
    print(f"Loss {'fell' if fell else 'did not fall'}: first {first:.6g}, final {final:.6g}")
    return 0 if fell else 1


def _epochs_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--epochs must be a positive integer, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--local", action="store_true", help="train in-process on the CPU, without Ray or a TPU")
    parser.add_argument("--epochs", type=_epochs_arg, help=f"epochs in --local mode (default {DEFAULT_EPOCHS})")
    args = parser.parse_args(argv)
    if args.local:
        return run_local(args.epochs or DEFAULT_EPOCHS)
    if args.epochs is not None:
        # Cluster runs take every setting from the stack's env vars; a flag here would be silently ignored.
        parser.error(f"--epochs applies to --local only; cluster runs read {ENV_EPOCHS}")
    try:
        config = config_from_env()
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return run_cluster(config)


if __name__ == "__main__":
    sys.exit(main())
