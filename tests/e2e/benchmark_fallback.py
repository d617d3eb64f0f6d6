"""Time to running under a plan A stock-out: the tutorial's setup against this project's fallback (issues 13, 26).

    venv/bin/python -m tests.e2e.benchmark_fallback              # the three setups, one after the other
    venv/bin/python -m tests.e2e.benchmark_fallback --window 90  # a longer window

Prints figures, asserts nothing. Plan A's pool (on-demand-pool of the dev stack) is stocked out and one RayJob
is submitted; the figure is the real time from submission to all of its pods Running (Kueue and the controller
run on the wall clock, so these are real seconds, not the simulated ones of benchmark_gke_sim.py). Three setups:

- the tutorial's setup (dev with `fallback: {enabled: false}`: Kueue as its plan installs it, no
  waitForPodsReady, no controller): Kueue falls back on quota only, so the job waits on plan A for as long as the
  stock-out lasts; it never runs within the window.
- this project, the timeout path (dev with the fallback on, short times: fallback_scenarios.FALLBACK; GKE's
  autoscaler Events never seen, `GkeSim.set_events(False)`): the controller has only its stockoutAfter backstop.
- this project, the signal path (the same, with GKE's FailedScaleUp on the pods): the controller closes plan A
  and evicts the job one poll after the Event.

The tutorial gets a simulated GKE of its own (its Kueue runs without waitForPodsReady); the two fallback setups
share one (reset between them). The clusters are started one after the other.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs


@dataclass(frozen=True)
class Setup:
    label: str
    box: fs.FallbackBox
    controller: bool
    events: bool = True


def _when(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _run(setup: Setup, window: float) -> dict[str, Any]:
    t0 = time.monotonic()
    with setup.box.scenario(controller=setup.controller) as env:
        ready = time.monotonic() - t0
        bound = env.bounds() if env.wait_for_pods_ready is not None else None
        outcome = fs.run_stockout_time_to_running(env, window, events=setup.events)
    facts = dict(outcome.facts)
    facts.update(label=setup.label, ready=ready, bound=bound, wait_for_pods_ready=setup.box.wait_for_pods_ready,
                 events=setup.events)
    return facts


def _print(facts: dict[str, Any]) -> None:
    bound: fs.Bounds | None = facts["bound"]
    print(f"== {facts['label']}")
    print(f"    cluster ready in {facts['ready']:.1f} s; Kueue waitForPodsReady: "
          f"{facts['wait_for_pods_ready'] or 'none'}")
    print(f"    GKE's autoscaler Events: {'written' if facts['events'] else 'never seen'} "
          f"({facts['failed_scale_ups']} FailedScaleUp written, {facts['suppressed_events']} Events not)")
    if facts["to_running"] is None:
        print(f"    job 1: never within {facts['window']:.0f} s (all pods Running: no); reservations "
              f"{[(_when(t), f) for t, f in facts['reservations']]}, evictions {facts['evictions'] or 'none'}")
        for line in str(facts["pods"]).splitlines()[:8]:
            print(f"      {line.strip()}")
    else:
        limit = "" if bound is None else (f" (bound {bound.after_signal():.0f} s after the Event)" if facts["events"]
                                          else f" (bound {bound.backstop_to_plan_b():.0f} s)")
        print(f"    job 1: all pods Running after {facts['to_running']:.1f} s on "
              f"{sorted(facts['worker_pools'])}{limit}")
        print(f"      after submission: admitted {_when(facts['admitted'])}; GKE's first no-capacity Event "
              f"{_when(facts['first_no_capacity'])}; plan A closed {_when(facts['tainted'])}; reservations "
              f"{[(_when(t), f) for t, f in facts['reservations']]}; evictions {facts['evictions'] or 'none'}")
    if facts.get("controller_cpu") is not None:
        print(f"      fallback controller: {facts['controller_cpu']:.2f} s CPU, peak RSS "
              f"{facts['controller_rss'] / 2**20:.0f} MiB")
    print(flush=True)


def _figure(facts: dict[str, Any], window: float) -> str:
    return f"never within {window:.0f} s" if facts["to_running"] is None else f"{facts['to_running']:.1f} s"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--window", type=float, default=None,
                        help="real seconds to wait for job 1 (default: the timeout path's bound plus 15 s)")
    args = parser.parse_args(argv)
    fallback = fs.FallbackBox(fs.FALLBACK)
    if fallback.wait_for_pods_ready is None:
        raise SystemExit("the fallback stack's plan has no waitForPodsReady in Kueue's Helm values")
    bound = fs.Bounds.of(fs.controller_config(fallback.infra), fallback.wait_for_pods_ready, fs.TIMINGS,
                         gs.SCALE.real_per_sim)
    window = args.window if args.window is not None else bound.backstop_to_plan_b() + 15
    print(f"plan A ({fs.PLAN_A_POOL}) stocked out, one RayJob; window {window:.0f} s real; the fallback: "
          f"{dict(fs.FALLBACK_SETTINGS)}\n", flush=True)
    tutorial = fs.FallbackBox(fs.NO_FALLBACK)
    setups = [
        (Setup(f"the tutorial's setup ({fs.NO_FALLBACK.name} {dict(fs.NO_FALLBACK.overrides)})", tutorial, False),
         "tutorial"),
        (Setup("this project, the timeout path (GKE's Events never seen: stockoutAfter)", fallback, True, False),
         "timeout path"),
        (Setup("this project, the signal path (GKE's FailedScaleUp)", fallback, True, True), "signal path"),
    ]
    results: list[tuple[str, dict[str, Any]]] = []
    try:
        for setup, short in setups:
            results.append((short, _run(setup, window)))
            if setup.box is tutorial:
                tutorial.close()  # one cluster at a time
    finally:
        tutorial.close()
        fallback.close()
    for _short, facts in results:
        _print(facts)
    print("summary: time from submission to all pods Running under a plan A stock-out: "
          + ", ".join(f"{short} {_figure(facts, window)}" for short, facts in results)
          + f" (the timeout path's bound {bound.backstop_to_plan_b():.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
