"""What a job pays for speaking: progress reported and lines logged at every step, against the
same job silent, run by a real worker (its executor writes the reports live, as in production).

    .venv/bin/python bench/reports.py                     # SQLite and PostgreSQL
    .venv/bin/python bench/reports.py --db postgres --rounds 7 --steps 10000

Each round runs the silent job and the speaking one back to back, in alternating order, on one
executor (`--concurrency 1`). A job's steps are timed inside the executor, by the wall clock and
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


def run_round(url, steps, loops, rounds):
    from bench.report_tasks import steps as task
    from jobs.models import Job, LogLine

    ids = []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        ids += [(speak, task.enqueue(steps, loops, speak).id) for speak in order]
    worker = subprocess.run(
        [sys.executable, "manage.py", "worker", "--burst", "--concurrency", "1"],
        cwd=ROOT,
        env=worker_env(url),
        check=False,
    )
    if worker.returncode != 0:
        raise SystemExit(f"worker exited with {worker.returncode}")
    silent, speaking, whole_silent, whole_speaking = [], [], [], []
    for speak, jid in ids:
        job = Job.objects.get(id=jid)
        if job.state != "succeeded":
            raise SystemExit(f"job {jid} ended {job.state}: {job.error_message}")
        whole = (job.finished_at - job.started_at).total_seconds()
        (speaking if speak else silent).append(job.return_value)  # [wall, cpu]
        (whole_speaking if speak else whole_silent).append(whole)
        if speak:
            assert job.progress["done"] == steps, job.progress
            kept = LogLine.objects.filter(job_id=jid).count()
            assert 0 < kept <= 1000, kept
    return silent, speaking, whole_silent, whole_speaking


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
    log(f"== {args.db}: {args.rounds} rounds of a {args.steps:,}-step job, silent and speaking")
    silent, speaking, whole_silent, whole_speaking = run_round(
        url, args.steps, args.loops, args.rounds
    )
    s, p = (statistics.median(x[0] for x in runs) for runs in (silent, speaking))
    cs, cp = (statistics.median(x[1] for x in runs) for runs in (silent, speaking))
    ws, wp = statistics.median(whole_silent), statistics.median(whole_speaking)
    log(f"steps, wall clock: silent {s:.3f} s, speaking {p:.3f} s: {100 * (p / s - 1):+.1f} %")
    extra = (cp - cs) / args.steps * 1e6
    log(
        f"steps, executor CPU: silent {cs:.3f} s, speaking {cp:.3f} s: {100 * (cp / cs - 1):+.1f} %"
    )
    log(f"  = {extra:.1f} µs of CPU per step for one progress report and one line logged")
    log(f"attempt: silent {ws:.3f} s, speaking {wp:.3f} s: {100 * (wp / ws - 1):+.1f} %")
    pairs = zip(silent, speaking, strict=True)
    log(f"every round (silent/speaking wall, s): {[f'{a[0]:.2f}/{b[0]:.2f}' for a, b in pairs]}")
    print(
        f"RESULT {args.db} silent={s:.3f} speaking={p:.3f} cpu_silent={cs:.3f} "
        f"cpu_speaking={cp:.3f} attempt_silent={ws:.3f} attempt_speaking={wp:.3f}"
    )


if __name__ == "__main__":
    main()
