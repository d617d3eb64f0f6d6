"""python -m tpu_fallback.fallback --config config.json [--kubeconfig FILE] [--once | --sweep] [--list-every-pass]

The controller acts only while it holds its Lease (lease.py): it waits for it before the first pass, a thread renews
it, and losing it stops the loop and exits 1 (Kubernetes restarts the container, which waits as a standby).
`--sweep` is the CronJob's one-shot sweeper (sweep.py)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from tpu_fallback.fallback.config import Settings
from tpu_fallback.fallback.controller import Controller
from tpu_fallback.fallback.kube import Kube
from tpu_fallback.fallback.lease import Lease
from tpu_fallback.fallback.metrics import Metrics, serve_metrics
from tpu_fallback.fallback.sweep import main as sweep_main
from tpu_fallback.fallback.view import ListingView, WatchingView


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpu_fallback.fallback", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="the config.json the infra stack renders")
    parser.add_argument("--kubeconfig", type=Path, help="outside a cluster: its current context (no exec plugins)")
    parser.add_argument("--once", action="store_true", help="one reconcile pass, then exit (no lease)")
    parser.add_argument("--sweep", action="store_true",
                        help="reopen expired closes and queue again what a controller that is not running left "
                             "deactivated, unless a live controller holds the lease; then exit (the CronJob)")
    parser.add_argument("--list-every-pass", action="store_true",
                        help="LIST every kind on every pass instead of watching (the former way, to compare)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_file(args.config)
    metrics = Metrics()
    kube = Kube.from_kubeconfig(args.kubeconfig) if args.kubeconfig else Kube.in_cluster()
    if args.sweep:
        return sweep_main(kube, settings)
    kube.on_request = lambda verb: metrics.add("tpu_fallback_api_requests_total", verb=verb)
    if args.once:
        Controller(kube, settings, metrics, ListingView(kube, settings.node_selector)).reconcile()
        return 0
    view = ListingView(kube, settings.node_selector) if args.list_every_pass else \
        WatchingView(kube, metrics, settings.node_selector)
    controller = Controller(kube, settings, metrics, view)
    if settings.metrics_port:
        serve_metrics(controller.metrics, settings.metrics_port, max_age=max(60.0, 10 * settings.poll_interval))
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        if isinstance(view, WatchingView):
            view.wake()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    out = logging.getLogger("tpu-fallback")
    lease = Lease(kube.fork(), settings.lease) if settings.lease is not None else None
    lost: list[str] = []
    renewing = threading.Event()  # set: the renew thread ends (after the way out, which still holds the lease)
    if lease is not None:
        # A standby's heartbeat: its liveness probe must pass while it waits (the loop has not started).
        def beat() -> None:
            metrics.beat()

        if not lease.acquire(stop, waiting=beat):
            out.info("stopped while waiting for the lease; nothing was done")
            return 0
        out.info("acquired the lease %s/%s as %s", lease.ref.namespace, lease.ref.name, lease.holder)
        metrics.set("tpu_fallback_lease_held", 1)

        def on_lost(why: str) -> None:
            lost.append(why)
            metrics.set("tpu_fallback_lease_held", 0)
            out.error("lost the lease (%s): stopping, touching nothing more", why)
            on_signal(signal.SIGTERM, None)

        lease.start_keeping(renewing, on_lost)
    else:
        out.warning("no lease configured (config.json has no \"lease\" or \"deployment\"): "
                    "run one replica only")
    ladder = " -> ".join(f"{r.name}{' (queued)' if r.queued else ''} {list(r.flavors)}" for r in settings.decide.ladder)
    out.info(
        "watching %s: stockoutAfter %ss, coolDown %ss, every %ss (reading the cluster %s)",
        f"plan A {list(settings.decide.plan_a_flavors)} -> plan B {list(settings.decide.plan_b_flavors)}"
        if settings.decide.two_plans else f"the ladder {ladder}",
        settings.decide.stockout_after, settings.decide.cool_down, settings.poll_interval,
        "with LISTs every pass" if args.list_every_pass else "by watching it, a pass on each change")
    if isinstance(view, WatchingView) and not view.start():
        out.warning("not every kind listed yet: passes wait for them (and count)")
    try:  # read before the first pass: a rollout, unlike a restart, releases plan A on the way out
        controller.remember_deployment()
    except Exception:  # the loop matters more; the way out then treats a rollout as a restart
        logging.getLogger("tpu-fallback").exception("could not read the controller's own Deployment")
    try:
        controller.run(stop)
        if isinstance(view, WatchingView):
            view.stop()
        if lost:  # another replica acts now: our way out would undo its work
            return 1
        try:  # fallback turned off, removed or rolled out: leave no taint behind (a restart keeps the close)
            controller.release_unless_restarted()
        except Exception:
            logging.getLogger("tpu-fallback").exception("could not check whether the controller is being removed")
            return 1
        return 0
    finally:
        renewing.set()
        if lease is not None and not lost and lease.release():
            out.info("released the lease")


if __name__ == "__main__":
    sys.exit(main())
