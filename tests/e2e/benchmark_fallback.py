"""Time to running under a plan A stock-out: the tutorial's setup against this project's fallback (issue 13).

    venv/bin/python -m tests.e2e.benchmark_fallback              # both, one after the other
    venv/bin/python -m tests.e2e.benchmark_fallback --window 90  # a longer window

Prints figures, asserts nothing. Plan A's pool (on-demand-pool of the dev stack) is stocked out and one RayJob
is submitted; the figure is the real time from submission to all of its pods Running (Kueue and the controller
run on the wall clock, so these are real seconds, not the simulated ones of benchmark_gke_sim.py):

- the tutorial's setup (dev with `fallback: {enabled: false}`: Kueue as its plan installs it, no
  waitForPodsReady, no controller): Kueue falls back on quota only, so the job waits on plan A for as long as the
  stock-out lasts; it never runs within the window.
- this project (dev with the fallback on, short times: fallback_scenarios.FALLBACK): Kueue with the plan's
  waitForPodsReady and the fallback controller; the job runs on plan B within a bound the config gives.

Each setup gets its own simulated GKE (Kueue's configuration differs), started one after the other.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

from tests.e2e import fallback_scenarios as fs
from tests.e2e import gke_scenarios as gs


def _when(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _run(label: str, box: fs.FallbackBox, window: float, controller: bool) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        with box.scenario(controller=controller) as env:
            ready = time.monotonic() - t0
            bound = env.bounds() if env.wait_for_pods_ready is not None else None
            outcome = fs.run_stockout_time_to_running(env, window)
    finally:
        box.close()
    facts = dict(outcome.facts)
    facts.update(label=label, ready=ready, bound=bound, wait_for_pods_ready=box.wait_for_pods_ready)
    return facts


def _print(facts: dict[str, Any]) -> None:
    bound: fs.Bounds | None = facts["bound"]
    print(f"== {facts['label']}: cluster ready in {facts['ready']:.1f} s; Kueue waitForPodsReady: "
          f"{facts['wait_for_pods_ready'] or 'none'}")
    if facts["to_running"] is None:
        print(f"    job 1: never within {facts['window']:.0f} s (all pods Running: no); reservations "
              f"{facts['reservations']}, evictions {facts['evictions'] or 'none'}, {facts['failed_scale_ups']} "
              "FailedScaleUp event(s)")
        for line in str(facts["pods"]).splitlines()[:8]:
            print(f"      {line.strip()}")
    else:
        print(f"    job 1: all pods Running after {facts['to_running']:.1f} s on {sorted(facts['worker_pools'])}"
              + (f" (bound {bound.to_plan_b():.0f} s: {bound.describe()})" if bound else ""))
        print(f"      admitted {_when(facts['admitted'])}; plan A tainted {_when(facts['tainted'])}; reservations "
              f"{[(_when(t), f) for t, f in facts['reservations']]}; released {[_when(t) for t in facts['releases']]}"
              f"; evictions {facts['evictions'] or 'none'}")
    if facts.get("controller_cpu") is not None:
        print(f"      fallback controller: {facts['controller_cpu']:.2f} s CPU, peak RSS "
              f"{facts['controller_rss'] / 2**20:.0f} MiB")
    print(flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--window", type=float, default=None,
                        help="real seconds to wait for job 1 (default: the fallback's bound plus 15 s)")
    args = parser.parse_args(argv)
    fallback = fs.FallbackBox(fs.FALLBACK)
    if fallback.wait_for_pods_ready is None:
        raise SystemExit("the fallback stack's plan has no waitForPodsReady in Kueue's Helm values")
    bound = fs.Bounds.of(fs.controller_config(fallback.infra), fallback.wait_for_pods_ready, fs.TIMINGS,
                         gs.SCALE.real_per_sim)
    window = args.window if args.window is not None else bound.to_plan_b() + 15
    print(f"plan A ({fs.PLAN_A_POOL}) stocked out, one RayJob; window {window:.0f} s real\n", flush=True)
    results = [
        _run(f"the tutorial's setup ({fs.NO_FALLBACK.name} {dict(fs.NO_FALLBACK.overrides)})",
             fs.FallbackBox(fs.NO_FALLBACK), window, controller=False),
        _run(f"this project ({fs.FALLBACK.name} {dict(fs.FALLBACK.overrides)})", fallback, window, controller=True),
    ]
    for facts in results:
        _print(facts)
    tutorial, project = results
    print("summary: time from submission to all pods Running under a plan A stock-out: tutorial "
          + (f"never within {window:.0f} s" if tutorial["to_running"] is None else f"{tutorial['to_running']:.1f} s")
          + ", this project "
          + (f"{project['to_running']:.1f} s" if project["to_running"] is not None else f"never within {window:.0f} s")
          + f" (bound {bound.to_plan_b():.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
