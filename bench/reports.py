"""What a job pays for speaking: progress reported and lines logged at every step, against the
same job silent, run by a real worker (its executor writes the reports live, as in production).

    .venv/bin/python bench/reports.py                     # SQLite and PostgreSQL
    .venv/bin/python bench/reports.py --db postgres --rounds 7 --steps 10000

Each round runs the job silent, logging through a plain logger that drops its lines (what any
logging costs), and speaking, back to back, each first in turn, on one executor
(`--concurrency 1`). A job's steps are timed inside the executor, by the wall clock and
by the CPU time of the executor process (the writer thread's work included; unlike the wall
clock, it does not move with the load other processes put on the machine). The attempt's time,
from the database, adds the last write (after the steps, before the outcome goes back).
Not part of the test suite: numbers go to bench/README.md.
"""

import argparse
import statistics
import subprocess
import sys

from throughput import ROOT, log, scratch_database, setup_django, worker_env

MODES = ("silent", "plain", "speaking")


def run_rounds(url, steps, loops, rounds):
    """{mode: [[wall, cpu, attempt seconds], ...]} over `rounds` rounds of every mode."""
    from bench.report_tasks import steps as task
    from jobs.models import Job, LogLine

    ids = []
    for r in range(rounds):
        order = MODES[r % 3 :] + MODES[: r % 3]  # each mode goes first in turn
        ids += [(mode, task.enqueue(steps, loops, mode).id) for mode in order]
    worker = subprocess.run(
        [sys.executable, "manage.py", "worker", "--burst", "--concurrency", "1"],
        cwd=ROOT,
        env=worker_env(url),
        check=False,
    )
    if worker.returncode != 0:
        raise SystemExit(f"worker exited with {worker.returncode}")
    runs = {mode: [] for mode in MODES}
    for mode, jid in ids:
        job = Job.objects.get(id=jid)
        if job.state != "succeeded":
            raise SystemExit(f"job {jid} ended {job.state}: {job.error_message}")
        attempt = (job.finished_at - job.started_at).total_seconds()
        runs[mode].append([*job.return_value, attempt])
        if mode == "speaking":
            assert job.progress["done"] == steps, job.progress
            kept = LogLine.objects.filter(job_id=jid).count()
            assert 0 < kept <= 1000, kept
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--loops", type=int, default=4_000, help="work per step (a sum loop)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.db == "both":
        for kind in ("sqlite", "postgres"):
            extra = ["--steps", str(args.steps), "--loops", str(args.loops)]
            subprocess.run(
                [sys.executable, __file__, "--db", kind, "--rounds", str(args.rounds), *extra],
                check=True,
            )
        return
    url = scratch_database(args.db)
    setup_django(url)
    log(f"== {args.db}: {args.rounds} rounds of a {args.steps:,}-step job, silent, plain, speaking")
    runs = run_rounds(url, args.steps, args.loops, args.rounds)
    med = {
        mode: [statistics.median(run[i] for run in runs[mode]) for i in range(3)] for mode in MODES
    }
    silent = med["silent"]
    for i, what in enumerate(("steps, wall clock", "steps, executor CPU", "attempt, wall")):
        figures = ", ".join(
            f"{mode} {med[mode][i]:.3f} s ({100 * (med[mode][i] / silent[i] - 1):+.1f} %)"
            for mode in MODES
        )
        log(f"{what}: {figures}")
    per_step = {mode: (med[mode][1] - silent[1]) / args.steps * 1e6 for mode in MODES}
    log(
        f"CPU per step over silent: plain logging {per_step['plain']:.1f} µs, "
        f"progress + a line through context.logger {per_step['speaking']:.1f} µs"
    )
    print(
        f"RESULT {args.db} "
        + " ".join(f"{m}_wall={med[m][0]:.3f} {m}_cpu={med[m][1]:.3f}" for m in MODES)
    )


if __name__ == "__main__":
    main()
