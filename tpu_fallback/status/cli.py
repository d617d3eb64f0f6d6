"""`tpu-fallback status`: where each job is, why it waits and what happens next.

Installed with the package as `tpu-fallback` and as the kubectl plugin `kubectl-tpu_fallback` (so `kubectl
tpu-fallback status` works too). Exit codes: 0 shown, 1 the cluster could not be read (one line says why), 2 bad
usage, 3 the job asked for is not there.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from tpu_fallback.status.explain import JobStatus, closed_rungs, explain, rung_names
from tpu_fallback.status.read import Reader, StatusError, read_cluster
from tpu_fallback.status.render import as_json, text


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tpu-fallback", description="Where your TPU jobs are and why they wait.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status = commands.add_parser(
        "status", help="each job in Kueue's queues: its state, where it runs, why it waits, what happens next",
        description="Each job in Kueue's queues (of one namespace, or all): its state, where it runs (rung, "
                    "flavor, pool, worker cluster), why it waits, its place in the queue and what happens next. "
                    "Reads the cluster through your kubeconfig, as kubectl does.")
    status.add_argument("job", nargs="?", help="one job: its name (the RayJob's, JobSet's, ...) or its Workload's")
    where = status.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", help="the namespace (default: the kubeconfig context's, else default)")
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text (default) or json")
    status.add_argument("-w", "--watch", action="store_true", help="redraw whenever something changes (Ctrl-C ends)")
    status.add_argument("--interval", type=float, default=2.0, help="seconds between reads with --watch (default 2)")
    status.add_argument("--kubeconfig", help="the kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    status.add_argument("--context", help="the kubeconfig context (default: its current context)")
    return top


def _select(statuses: list[JobStatus], job: str | None) -> list[JobStatus]:
    if job is None:
        return statuses
    return [s for s in statuses if job in (s.job_name, s.workload)]


def render_once(reader: Reader, args: argparse.Namespace) -> tuple[str, bool, str]:
    """(the output, whether the job asked for was found, what --watch compares: the output without the ages,
    which change every second)."""
    namespace = None if args.all_namespaces else (args.namespace or reader.namespace)
    cluster = read_cluster(reader, namespace)
    every = explain(cluster)
    statuses = _select(every, args.job)
    scope = "every namespace" if namespace is None else f"namespace {namespace}"
    closed = sorted(closed_rungs(cluster).values(), key=lambda r: r.flavor)
    names = rung_names(cluster.controller)
    unchanging = text(statuses, 0.0, cluster.notes, scope, closed, names)
    if args.output == "json":
        return (as_json(statuses, cluster.now, cluster.notes, closed), bool(statuses) or args.job is None,
                unchanging)
    if args.job is not None and not statuses:
        jobs = sorted({s.job_name for s in every})
        seen = f" (jobs there: {', '.join(jobs[:10])}{', ...' if len(jobs) > 10 else ''})" if jobs else ""
        return f"no job or Workload named {args.job} in {scope}{seen}\n", False, ""
    return text(statuses, cluster.now, cluster.notes, scope, closed, names), True, unchanging


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.interval <= 0:
        parser().error(f"--interval {args.interval:g} is invalid: expected a number of seconds above 0")
    try:
        reader = Reader(args.kubeconfig, args.context)
        if not args.watch:
            output, found, _key = render_once(reader, args)
            sys.stdout.write(output)
            return 0 if found else 3
        last = None
        while True:
            output, _found, key = render_once(reader, args)
            if key != last:
                if sys.stdout.isatty():
                    sys.stdout.write("\x1b[H\x1b[2J")  # home, clear: a redraw, as `watch` does
                elif last is not None:
                    sys.stdout.write("---\n")
                sys.stdout.write(output)
                sys.stdout.flush()
                last = key
            time.sleep(args.interval)
    except StatusError as err:
        sys.stderr.write(f"tpu-fallback status: {err}\n")
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
