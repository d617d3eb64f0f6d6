"""Figures of the simulated-GKE scenarios (gke_scenarios.py): printed, never asserted.

    venv/bin/python -m tests.e2e.benchmark_gke_sim                 # every scenario
    venv/bin/python -m tests.e2e.benchmark_gke_sim tutorial prod   # some of them
    venv/bin/python -m tests.e2e.benchmark_gke_sim --suite         # and the wall time of the whole e2e suite

The scenarios run one after the other on one cluster, reset in between (as the tests do). For each: the time to
get the cluster ready (start-up for the first, reset for the others); per job, the simulated time from submission
to admission, to all of its pods Running and to its end (real seconds divided by the time scale: the controllers'
own real-time latencies, KubeRay's 3 s requeue above all, are inflated by the same factor, so these are upper
bounds); the real time the scenario took; and the CPU seconds of each controller (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, KWOK, KubeRay, Kueue) over the scenario and in all, with its peak memory
so far (VmHWM).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from tests.e2e import gke_scenarios as gs
from tests.e2e.controlplane import ControlPlane, ProcessUsage
from tests.e2e.gke_sim import GkeSim, pools_from_plan, simulated_gke
from tests.e2e.kube import KubeClient
from tpu_fallback.offline.mockrun import REPO_ROOT, ProgramRun

Runner = Callable[[KubeClient, GkeSim, ProgramRun], gs.Outcome]
SCENARIOS: dict[str, tuple[gs.Stack, Runner]] = {
    "tutorial": (gs.TUTORIAL, gs.run_tutorial),
    "two-slices": (gs.TWO_SLICES, gs.run_two_slices),
    "prod": (gs.PROD, gs.run_prod),
    "stockout": (gs.STOCKOUT, gs.run_stockout),
    "dws-faults": (gs.DWS_FAULTS, gs.run_dws_faults),
}


def _usage_lines(before: dict[str, ProcessUsage], after: dict[str, ProcessUsage]) -> list[str]:
    lines = []
    for name, u in after.items():
        spent = u.cpu_seconds - (before[name].cpu_seconds if name in before else 0.0)
        lines.append(f"    {name:20} {spent:6.1f} s CPU in the scenario, {u.cpu_seconds:6.1f} s in all, "
                     f"peak RSS {u.peak_rss_bytes / 2**20:5.0f} MiB")
    return lines


def run(names: Sequence[str]) -> None:
    """The scenarios one after the other on one cluster (reset in between, as the tests do)."""
    with contextlib.ExitStack() as stack:
        plane: ControlPlane | None = None
        sim: GkeSim | None = None
        for name in names:
            scenario_stack, runner = SCENARIOS[name]
            infra = scenario_stack.render()
            pools = pools_from_plan(infra)
            t0 = time.monotonic()
            if plane is None or sim is None:
                plane, sim = stack.enter_context(simulated_gke(pools, scale=gs.SCALE, timings=gs.TIMINGS))
                print(f"cluster up in {time.monotonic() - t0:.1f} s "
                      f"({', '.join(f'{k} {v:.1f}' for k, v in plane.timings.items())})\n", flush=True)
            else:
                gs.reset(plane.client, sim, pools)
            ready = time.monotonic() - t0
            before = plane.usage()
            t1 = time.monotonic()
            outcome: gs.Outcome | None = None
            error: BaseException | None = None
            try:
                outcome = runner(plane.client, sim, infra)
            except (AssertionError, TimeoutError) as err:
                error = err
            took = time.monotonic() - t1
            after = plane.usage()
            overrides = f", {dict(scenario_stack.overrides)}" if scenario_stack.overrides else ""
            print(f"== {name} ({scenario_stack.name} stack{overrides}): ready in {ready:.1f} s, scenario "
                  f"{took:.1f} s real = {gs.SCALE.sim(took):.0f} s simulated ({gs.SCALE.real_per_sim} real s per "
                  "simulated s)", flush=True)
            if outcome is not None:
                for line in outcome.watch.figures():
                    print("    " + line)
            if error is not None:
                print(f"    the scenario stopped: {type(error).__name__}: {str(error).splitlines()[0]}")
            for line in _usage_lines(before, after):
                print(line)
            print(flush=True)


def suite() -> None:
    """Wall time of the whole e2e suite (`pytest tests/e2e -m e2e`), as the CI runs it."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/e2e", "-m", "e2e", "-q", "-p", "no:cacheprovider"],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    took = time.monotonic() - t0
    last = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"== the whole e2e suite: {took:.0f} s wall ({last})", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("scenarios", nargs="*", help=f"some of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--suite", action="store_true", help="also time the whole e2e suite")
    args = parser.parse_args(argv)
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    run(args.scenarios or list(SCENARIOS))
    if args.suite:
        suite()
    return 0


if __name__ == "__main__":
    sys.exit(main())
