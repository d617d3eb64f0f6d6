"""python -m tpu_fallback.fallback --config config.json [--kubeconfig FILE] [--once]"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from tpu_fallback.fallback.controller import Controller, Settings, serve_metrics
from tpu_fallback.fallback.kube import Kube


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu_fallback.fallback", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="the config.json the infra stack renders")
    parser.add_argument("--kubeconfig", type=Path, help="outside a cluster: its current context (no exec plugins)")
    parser.add_argument("--once", action="store_true", help="one reconcile pass, then exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_file(args.config)
    kube = Kube.from_kubeconfig(args.kubeconfig) if args.kubeconfig else Kube.in_cluster()
    controller = Controller(kube, settings)
    if args.once:
        controller.reconcile()
        return 0
    if settings.metrics_port:
        serve_metrics(controller.metrics, settings.metrics_port, max_age=max(60.0, 10 * settings.poll_seconds))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logging.getLogger("tpu-fallback").info(
        "watching plan A %s -> plan B %s: stockoutAfter %ss, coolDown %ss, every %ss",
        list(settings.decide.plan_a_flavors), list(settings.decide.plan_b_flavors),
        settings.decide.stockout_after, settings.decide.cool_down, settings.poll_seconds)
    try:  # read before the first pass: a rollout, unlike a restart, releases plan A on the way out
        controller.remember_deployment()
    except Exception:  # the loop matters more; the way out then treats a rollout as a restart
        logging.getLogger("tpu-fallback").exception("could not read the controller's own Deployment")
    controller.run(stop)
    try:  # fallback turned off, removed or rolled out: leave no taint behind (a restart keeps the close)
        controller.release_unless_restarted()
    except Exception:
        logging.getLogger("tpu-fallback").exception("could not check whether the controller is being removed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
