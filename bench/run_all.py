"""Side-by-side benchmarks: jobsite against django-tasks-db, procrastinate, django-q2, pgqueuer.

    .venv/bin/python bench/run_all.py            # the full matrix (~45-60 min on 2 cores)
    .venv/bin/python bench/run_all.py --quick    # 1 round, small N (~10 min), for development
    .venv/bin/python bench/run_all.py --only drain,latency --systems jobsite,pgqueuer

Installs each peer into its own virtualenv under bench/.peers/<name>/ from the pinned
bench/requirements-<name>.txt (first run only), gives each system its own scratch database
on the local PostgreSQL (bench_<name>) or SQLite file (bench/results/sqlite/), runs every
scenario interleaved across systems (A, B, C, A, B, C ...) for several rounds, checks that
every job ran exactly once (or exactly as often as its retries demand) and nothing was left
running, then writes medians into bench/README.md ("## Side by side") and bench/chart.png.
Raw results: bench/results/run-<stamp>/results.json (git-ignored). Never part of the tests.
BENCH_DB_PREFIX=x_ names the PostgreSQL databases x_bench_<name> (likewise bench/throughput.py's
and bench/baseline.py's x_jobsite_bench), for runs that share one server.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import harness as h  # noqa: E402
from bench.peers import report  # noqa: E402
from bench.peers.common import IDLE_GAP  # noqa: E402

BASE_PYTHON = "/root/.pyenv/versions/3.13.0/bin/python"

FULL = {
    "rounds": 3,
    "enqueue_n": 10_000,
    "enqueue_cap": 10,
    "drain": [(10_000, [1, 2, 4], 15), (100_000, [4], 20)],  # (n, concurrencies, cap s)
    "latency_n": 1000,
    "latency_polling_n": {"django-tasks-db": 40, "django-q2": 100},
    "retry_n": 2000,
    "retry_concurrency": 4,
    "retry_cap": 20,
    "sqlite_drain": [(10_000, [1, 2, 4], 15)],
    "mixed_n": 600,  # 1/10/100 ms jobs: 37 ms on average, ~108 jobs/s at best at concurrency 4
    "mixed_concurrency": 4,
    "mixed_pace": 60,  # jobs/s arriving, ~55 % of that best
    "mixed_cap": 30,
    "async_n": 10_000,  # async def jobs awaiting async_ms, async_in_flight coroutines at once
    "async_ms": 100,
    "async_in_flight": 200,
    "async_cap": 60,
}
QUICK = {
    "rounds": 1,
    "enqueue_n": 1000,
    "enqueue_cap": 3,
    "drain": [(2000, [1, 4], 5)],
    "latency_n": 50,
    "latency_polling_n": {"django-tasks-db": 10, "django-q2": 20},
    "retry_n": 300,
    "retry_concurrency": 4,
    "retry_cap": 10,
    "sqlite_drain": [(2000, [1, 4], 5)],
    "mixed_n": 150,
    "mixed_concurrency": 4,
    "mixed_pace": 60,
    "mixed_cap": 10,
    "async_n": 2000,
    "async_ms": 100,
    "async_in_flight": 200,
    "async_cap": 20,
}

# Which configurations take part in which scenario. Enqueueing does not depend on the worker
# configuration; django-tasks-db's "fast" only changes idle polling, so it joins the latency runs.
# "fast-persistent" = "fast" + persistent database connections (CONN_MAX_AGE = None): both
# Django peers call close_old_connections() around each task, so with Django's default they
# reconnect to PostgreSQL for every job.
PG_DRAIN = [
    ("jobsite", "default"),
    ("django-tasks-db", "default"),
    ("django-tasks-db", "fast-persistent"),
    ("procrastinate", "default"),
    ("django-q2", "default"),
    ("django-q2", "fast-persistent"),
    ("pgqueuer", "default"),
    ("pgqueuer", "fast"),
]
PG_LATENCY = [
    ("jobsite", "default"),
    ("django-tasks-db", "default"),
    ("django-tasks-db", "fast-persistent"),
    ("procrastinate", "default"),
    ("django-q2", "default"),
    ("django-q2", "fast-persistent"),
    ("pgqueuer", "default"),
]
PG_ENQUEUE = [
    ("jobsite", "default"),
    ("django-tasks-db", "default"),
    ("procrastinate", "default"),
    ("django-q2", "default"),
    ("pgqueuer", "default"),
]
PG_RETRY = [
    ("jobsite", "default"),
    ("procrastinate", "default"),
    ("django-q2", "default"),
    ("pgqueuer", "default"),
]
# The mixed workload: each system with its fastest setting (and pgqueuer's default as well).
PG_MIXED = [
    ("jobsite", "default"),
    ("django-tasks-db", "fast-persistent"),
    ("procrastinate", "default"),
    ("django-q2", "fast-persistent"),
    ("pgqueuer", "default"),
    ("pgqueuer", "fast"),
]
SQLITE = [("jobsite", "default"), ("django-tasks-db", "default"), ("django-tasks-db", "fast")]
# async def bodies: each system's way of running many coroutines at once.
PG_ASYNC = [
    ("jobsite", "async"),
    ("procrastinate", "default"),
    ("pgqueuer", "async"),
    ("pgqueuer", "async-unbounded"),
]
SCENARIOS = ["enqueue", "drain", "latency", "retry", "mixed", "async", "sqlite"]


def ensure_venv(name, requirements):
    venv = ROOT / "bench/.peers" / name
    if (venv / "bin/python").exists():
        return True
    h.log(f"installing {name} into {venv} from {requirements.name}")
    base = BASE_PYTHON if Path(BASE_PYTHON).exists() else sys._base_executable
    try:
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin/pip"), "install", "-q", "-r", str(requirements)], check=True
        )
    except subprocess.CalledProcessError as e:
        h.log(f"   !! could not install {name}: {e}")
        return False
    return True


def git(*args):
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def jobsite_snapshot(ref):
    """Without a ref: the working tree (described by HEAD and whether the engine is edited).
    With one: an exported copy of that commit, which later edits cannot disturb."""
    head = git("rev-parse", "--short=10", "HEAD")
    if not ref:
        dirty = git("status", "--porcelain", "--", "jobs", "jobsite")
        return f"working tree at {head}" + (" with uncommitted engine changes" if dirty else "")
    sha = git("rev-parse", "--short=10", ref)
    dest = ROOT / "bench/.peers" / f"jobsite-{sha}"
    if not (dest / "manage.py").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", sha], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    os.environ["BENCH_JOBSITE_SRC"] = str(dest)
    return f"commit {sha} ({git('log', '-1', '--format=%s', sha)[:70]})"


def wait_for_quiet(max_wait, threshold=1.5):
    deadline = time.monotonic() + max_wait
    while True:
        load = os.getloadavg()[0]
        if load <= threshold or time.monotonic() >= deadline:
            return load
        h.log(f"load average {load:.2f} > {threshold}: waiting for a quieter machine ...")
        time.sleep(30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 round, small N")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--only", help=f"comma-separated scenarios from {','.join(SCENARIOS)}")
    parser.add_argument("--systems", help="comma-separated systems (default: all)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="SECONDS",
        help="wait up to this long for the 1-min load average to drop <= 1.5",
    )
    parser.add_argument(
        "--jobsite-ref",
        metavar="GIT_REF",
        help="measure jobsite at this commit (a `git archive` snapshot under "
        "bench/.peers/) instead of the working tree",
    )
    parser.add_argument(
        "--variants",
        metavar="SYSTEM:CONFIG,...",
        help="run only these system/configuration pairs (in the scenarios "
        "whose lists name the system)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="override one entry of the plan, e.g. --set 'drain=[[10000,[4],15]]'",
    )
    parser.add_argument(
        "--merge-into",
        metavar="RESULTS_JSON",
        help="add this run's measurements to an earlier results.json (a "
        "supplement) and report from the merged file",
    )
    parser.add_argument(
        "--no-readme", action="store_true", help="do not rewrite bench/README.md / bench/chart.png"
    )
    args = parser.parse_args()

    plan = dict(QUICK if args.quick else FULL)
    if args.rounds:
        plan["rounds"] = args.rounds
    for item in args.set:
        key, value = item.split("=", 1)
        if key not in plan:
            parser.error(f"--set: unknown plan key {key!r} (one of {', '.join(plan)})")
        plan[key] = json.loads(value)
    scenarios = args.only.split(",") if args.only else SCENARIOS
    wanted = set(args.systems.split(",")) if args.systems else None
    only_pairs = (
        [tuple(p.split(":", 1)) for p in args.variants.split(",")] if args.variants else None
    )

    jobsite_source = jobsite_snapshot(args.jobsite_ref)
    specs = h.load_specs()
    for spec in specs.values():
        if spec.venv:
            ensure_venv(spec.venv, ROOT / f"bench/requirements-{spec.venv}.txt")
    ensure_venv("chart", ROOT / "bench/requirements-chart.txt")

    if args.wait_quiet:
        wait_for_quiet(args.wait_quiet)
    run = h.Run(quick=args.quick)
    run.meta = {
        **h.machine_info(),
        "quick": args.quick,
        "plan": plan,
        "versions": h.versions(specs),
        "scenarios": scenarios,
        "idle_gap_ms": [1000 * x for x in IDLE_GAP],
        "jobsite_source": jobsite_source,
    }
    h.log(f"results in {run.dir}; load average {run.meta['loadavg_start']}; plan {plan}")

    def variants(pairs, db="postgres"):
        out = []
        if only_pairs:
            names = {name for name, _ in pairs}
            pairs = [p for p in only_pairs if p[0] in names]
        for name, config in pairs:
            if wanted and name not in wanted:
                continue
            if not h.installed(specs[name]):
                run.fail(f"{name}", "not installed")
                continue
            out.append(h.Variant(specs[name], db, config))
        return out

    # Each system's database is created (migrated / schema installed) once per run.
    ready = set()

    def setup(vs):
        usable = []
        for v in vs:
            key = (v.name, v.db)
            if key not in ready:
                try:
                    v.driver("setup")
                    ready.add(key)
                except h.BenchError as e:
                    run.fail(f"setup {v.name} on {v.db}", e)
                    continue
            usable.append(v)
        return usable

    rounds = plan["rounds"]
    loads = run.meta.setdefault("loadavg", {})

    if "enqueue" in scenarios:
        vs = setup(variants(PG_ENQUEUE))
        loads["enqueue"] = os.getloadavg()
        h.log(
            f"== (1) enqueue {plan['enqueue_n']:,} no-op jobs: one call at a time (stops "
            f"after {plan['enqueue_cap']} s) and with each bulk API; PostgreSQL"
        )
        for rnd in range(rounds):
            h.log(f"-- round {rnd + 1}/{rounds}")
            for v in vs:
                h.attempt(
                    run,
                    f"enqueue {v.label}",
                    h.measure_enqueue,
                    v,
                    plan["enqueue_n"],
                    rnd,
                    cap=plan["enqueue_cap"],
                )

    if "drain" in scenarios:
        vs = setup(variants(PG_DRAIN))
        loads["drain"] = os.getloadavg()
        for n, concurrencies, cap in plan["drain"]:
            for c in concurrencies:
                h.log(
                    f"== (2) drain {n:,} pre-enqueued no-op jobs, concurrency {c}, PostgreSQL "
                    f"(a drain still running after {cap} s is stopped and measured so far)"
                )
                for rnd in range(rounds):
                    h.log(f"-- round {rnd + 1}/{rounds}")
                    for v in vs:
                        h.attempt(
                            run, f"drain {n} c{c} {v.label}", h.measure_drain, v, n, c, rnd, cap=cap
                        )

    if "latency" in scenarios:
        vs = setup(variants(PG_LATENCY))
        loads["latency"] = os.getloadavg()
        h.log(
            "== (3) wake-up latency: jobs enqueued one after another into an idle worker "
            "(concurrency 1), enqueue to start, PostgreSQL"
        )
        for rnd in range(rounds):
            h.log(f"-- round {rnd + 1}/{rounds}")
            for v in vs:
                n = plan["latency_n"]
                if v.config == "default":
                    n = plan["latency_polling_n"].get(v.name, n)
                h.attempt(run, f"latency {v.label}", h.measure_latency, v, n, rnd)

    if "retry" in scenarios:
        vs = setup(variants(PG_RETRY))
        loads["retry"] = os.getloadavg()
        n, c, cap = plan["retry_n"], plan["retry_concurrency"], plan["retry_cap"]
        for mode, what in (
            ("flaky", "every job fails once, then succeeds"),
            ("fail", "every job always fails: 3 attempts, then dead"),
        ):
            h.log(f"== (4) retry-heavy, {n:,} jobs, concurrency {c}: {what}; smallest backoff")
            for rnd in range(rounds):
                h.log(f"-- round {rnd + 1}/{rounds}")
                for v in vs:
                    h.attempt(
                        run,
                        f"retry {mode} {v.label}",
                        h.measure_drain,
                        v,
                        n,
                        c,
                        rnd,
                        mode=mode,
                        cap=cap,
                    )

    if "mixed" in scenarios:
        vs = setup(variants(PG_MIXED))
        loads["mixed"] = os.getloadavg()
        n, c = plan["mixed_n"], plan["mixed_concurrency"]
        pace, cap = plan["mixed_pace"], plan["mixed_cap"]
        h.log(
            f"== (5) mixed 1/10/100 ms jobs, concurrency {c}: {n:,} pre-enqueued, then {n:,} "
            f"arriving at {pace}/s; PostgreSQL"
        )
        for rnd in range(rounds):
            h.log(f"-- round {rnd + 1}/{rounds}")
            for v in vs:
                h.attempt(
                    run, f"mixed drain {v.label}", h.measure_drain, v, n, c, rnd, "mixed", cap=cap
                )
                h.attempt(
                    run,
                    f"mixed paced {v.label}",
                    h.measure_latency,
                    v,
                    n,
                    rnd,
                    concurrency=c,
                    pace=pace,
                )

    if "async" in scenarios:
        vs = setup(variants(PG_ASYNC))
        loads["async"] = os.getloadavg()
        n, c, cap = plan["async_n"], plan["async_in_flight"], plan["async_cap"]
        os.environ["BENCH_AWAIT_MS"] = str(plan["async_ms"])
        h.log(
            f"== (4c) {n:,} async def jobs awaiting {plan['async_ms']} ms, {c} in flight; "
            "PostgreSQL"
        )
        for rnd in range(rounds):
            h.log(f"-- round {rnd + 1}/{rounds}")
            for v in vs:
                h.attempt(run, f"async {v.label}", h.measure_drain, v, n, c, rnd, "await", cap=cap)

    if "sqlite" in scenarios:
        vs = setup(variants(SQLITE, db="sqlite"))
        loads["sqlite"] = os.getloadavg()
        h.log("== (6) SQLite: jobsite against django-tasks-db")
        for rnd in range(rounds):
            h.log(f"-- enqueue, round {rnd + 1}/{rounds}")
            for v in vs:
                if v.config == "default":
                    h.attempt(
                        run,
                        f"sqlite enqueue {v.label}",
                        h.measure_enqueue,
                        v,
                        plan["enqueue_n"],
                        rnd,
                        cap=plan["enqueue_cap"],
                    )
        for n, concurrencies, cap in plan["sqlite_drain"]:
            for c in concurrencies:
                h.log(f"-- drain {n:,}, concurrency {c}")
                for rnd in range(rounds):
                    for v in vs:
                        h.attempt(
                            run,
                            f"sqlite drain {n} c{c} {v.label}",
                            h.measure_drain,
                            v,
                            n,
                            c,
                            rnd,
                            cap=cap,
                        )
        h.log("-- wake-up latency")
        for rnd in range(rounds):
            for v in vs:
                n = plan["latency_n"]
                if v.config == "default":
                    n = plan["latency_polling_n"].get(v.name, n)
                h.attempt(run, f"sqlite latency {v.label}", h.measure_latency, v, n, rnd)

    run.meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    run.meta["loadavg_end"] = os.getloadavg()
    run.meta["duration_s"] = time.monotonic() - h.T0
    run.save()
    h.log(
        f"done in {run.meta['duration_s'] / 60:.1f} min; {len(run.records)} measurements, "
        f"{len(run.failures)} failures"
    )
    source = run.dir / "results.json"
    if args.merge_into:
        source = report.merge(Path(args.merge_into), source)
        h.log(f"merged into {source}")
    markdown = report.markdown(source)
    (run.dir / "summary.md").write_text(markdown)
    print(markdown)
    if not args.no_readme:
        report.update_readme(markdown)
        chart_python = ROOT / "bench/.peers/chart/bin/python"
        subprocess.run(
            [
                str(chart_python),
                str(ROOT / "bench/chart.py"),
                str(source),
                str(ROOT / "bench/chart.png"),
            ],
            check=False,
        )
        h.log("bench/README.md (## Side by side) and bench/chart.png updated")


if __name__ == "__main__":
    main()
