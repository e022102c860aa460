"""Turns a results.json into the "## Side by side" section of bench/README.md (medians, ratios)."""

import json
import statistics
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "bench/README.md"
SECTION = "## Side by side"
COMMAND = ".venv/bin/python bench/run_all.py"

TARGETS = {
    "moonshot": 10_000,  # no-op jobs/s on this 2-core machine
    "pgqueuer_ratio": 1.0,  # drain and bulk enqueue against pgqueuer's fastest durable setting
    "peer_ratio": 10,  # drain against every other peer, with its documented fast settings
    "p50": 5,
    "p99": 20,
    "retry_share": 0.50,
}


def label(system, config):
    return system if config == "default" else f"{system} ({config})"


def fmt_rate(x):
    if x is None:
        return "–"
    return f"{x:,.0f}" if x >= 10 else f"{x:,.1f}"


def fmt_ratio(x):
    if x is None:
        return "–"
    return f"{x:,.1f}×" if x < 100 else f"{x:,.0f}×"


class Results:
    def __init__(self, path):
        data = json.loads(Path(path).read_text())
        self.meta, self.records, self.failures = data["meta"], data["records"], data["failures"]
        self.groups = defaultdict(list)
        for r in self.records:
            key = (
                r["scenario"],
                r["db"],
                r["system"],
                r["config"],
                r.get("n"),
                r.get("concurrency"),
            )
            self.groups[key].append(r)

    def median(self, field, scenario, db, system, config="default", n=None, c=None):
        rows = self.groups.get((scenario, db, system, config, n, c), [])
        values = [r[field] for r in rows if r.get(field) is not None]
        return statistics.median(values) if values else None

    def rounds(self, scenario, db, system, config="default", n=None, c=None):
        return self.groups.get((scenario, db, system, config, n, c), [])

    def capped(self, scenario, db, system, config, n, c):
        return any(r.get("capped") for r in self.rounds(scenario, db, system, config, n, c))

    def mark(self, scenario, db, system, config, n, c):
        rows = self.rounds(scenario, db, system, config, n, c)
        out = ""
        if any(r.get("capped") for r in rows):
            out += " †"
        if any(r.get("problems") for r in rows):
            out += " ✗"
        return out

    def variants(self, scenario, db):
        seen = []
        for r in self.records:
            if r["scenario"] == scenario and r["db"] == db:
                v = (r["system"], r["config"])
                if v not in seen:
                    seen.append(v)
        return sorted(seen, key=lambda v: (v[0] != "jobsite",))

    def cells(self, scenario, db):
        seen = []
        for r in self.records:
            if r["scenario"] == scenario and r["db"] == db:
                cell = (r.get("n"), r.get("concurrency"))
                if cell not in seen:
                    seen.append(cell)
        return seen


def ratio(mine, theirs, lower_is_better=False):
    if not mine or not theirs:
        return None
    return theirs / mine if lower_is_better else mine / theirs


def markdown(path):
    R = Results(path)
    m = R.meta
    out = [SECTION, ""]
    plan = m.get("plan", {})
    out += [
        f"Measured {m.get('started')} – {m.get('finished')} "
        f"({(m.get('duration_s') or 0) / 60:.0f} min, "
        f"{'quick mode' if m.get('quick') else 'full run'}, "
        f"{plan.get('rounds')} round(s), medians shown; systems interleaved A, B, C, A, B, C ...). "
        f"Rerun everything with:",
        "",
        "```sh",
        COMMAND + "            # full matrix, ~45-60 min; --quick for a ~10 min smoke run",
        "```",
        "",
        "How it works: `bench/run_all.py` installs each peer into its own virtualenv "
        "(`bench/.peers/<name>/`, pinned in `bench/requirements-<name>.txt`), gives every system "
        "its own fresh database on the same PostgreSQL, and drives each one through a small "
        "adapter (`bench/peers/<name>_adapter.py`) run by the system's own interpreter. Every "
        "system runs the same job body (`bench/peers/common.py`): it appends `id start-time` to "
        "an execution log with one `O_APPEND` write. Rates and latencies come from that log, the "
        "same way for every system, and after every run the harness checks that each job id ran "
        "exactly once (retry scenarios: exactly twice / three times) and that the system's own "
        "tables show nothing left running. Pre-enqueued queues are filled once per system with "
        "its fastest insert path and cloned per run (`CREATE DATABASE ... TEMPLATE`). A drain "
        "still going at the time cap is stopped with SIGTERM and measured over what ran (marked "
        "†) — the slow peers would otherwise need hours. `--quick` (1 round, small N), `--only "
        "drain,latency`, `--systems jobsite,pgqueuer`, `--jobsite-ref HEAD` (measure a commit, "
        "not the working tree) and `--wait-quiet 600` (wait for load ≤ 1.5) narrow a run.",
        "",
        f"**Machine:** {m.get('nproc')} cores ({m.get('cpu', '?')}), {m.get('mem_gb')} GB RAM, "
        f"{m.get('postgres', 'PostgreSQL ?')} on 127.0.0.1 with durable commits "
        f"(synchronous_commit={m.get('synchronous_commit')}, fsync={m.get('fsync')}), "
        f"one database per system. Load average at the start: "
        f"{', '.join(f'{x:.2f}' for x in m.get('loadavg_start', []))}; per scenario: "
        + "; ".join(f"{k} {v[0]:.2f}" for k, v in m.get("loadavg", {}).items())
        + f"; at the end: {', '.join(f'{x:.2f}' for x in m.get('loadavg_end', []))}. "
        f"jobsite measured: {m.get('jobsite_source', '?')}. "
        + "".join(
            f"Supplementary run {s['started']} – {s['finished']} (load at its start "
            f"{s['loadavg_start'][0]:.2f}, {s['rounds']} rounds, not interleaved with the main "
            f"run): {', '.join(s['what'])} in {', '.join(s['scenarios'])}. "
            for s in m.get("supplements", [])
        )
        + "Other engineers' test suites may share the machine: a load above ~1.5 on 2 cores "
        "depresses every system, and the peers (more processes) somewhat more.",
        "",
        "| system | version | Python | how it runs here |",
        "|---|---|---|---|",
    ]
    for name, v in m.get("versions", {}).items():
        django = f" (Django {v['django']})" if v.get("django") and name != "jobsite" else ""
        version = v.get("version") or "?"
        if name == "jobsite":
            version = f"this repo (Django {v.get('django')})"
        out.append(
            f"| {name} | {version}{django} | {v.get('python') or 'not installed'} | "
            f"{v.get('notes')} |"
        )
    out += [
        "",
        "Settings: *default* = the system's defaults; *fast* = its documented speed "
        "settings (django-tasks-db: `--interval 0.01 --no-startup-delay`; django-q2: "
        "`bulk 50, poll 0.01, queue_limit 200, save_limit -1`; pgqueuer: `batch_size 100`); "
        "*fast-persistent* = *fast* plus Django's persistent connections (`CONN_MAX_AGE = "
        "None`): both Django peers call `close_old_connections()` around every task or broker "
        "call, so with Django's default (0) they open a new PostgreSQL connection per job. "
        "procrastinate's documented knob is `concurrency`, which is the concurrency axis "
        "itself; jobsite has no tuning flags beyond `--concurrency`. "
        "Ratios are jobsite ÷ peer for rates (> 1 = jobsite faster) and peer ÷ jobsite for "
        "latency and memory (> 1 = jobsite lower).",
        "",
    ]

    # (1) enqueue
    if R.variants("enqueue", "postgres"):
        n = plan.get("enqueue_n")
        out += [
            f"### 1. Enqueue {n:,} no-op jobs (PostgreSQL), jobs/s",
            "",
            "| system | one call at a time | jobsite ÷ peer | bulk API | jobsite ÷ peer |",
            "|---|---:|---:|---:|---:|",
        ]
        js = R.median("single_per_s", "enqueue", "postgres", "jobsite", n=n)
        jb = R.median("bulk_per_s", "enqueue", "postgres", "jobsite", n=n)
        for system, config in R.variants("enqueue", "postgres"):
            s = R.median("single_per_s", "enqueue", "postgres", system, config, n=n)
            b = R.median("bulk_per_s", "enqueue", "postgres", system, config, n=n)
            bulk = fmt_rate(b) if b else "no bulk API"
            out.append(
                f"| {label(system, config)} | {fmt_rate(s)} | "
                f"{'' if system == 'jobsite' else fmt_ratio(ratio(js, s))} | {bulk} | "
                f"{'' if system == 'jobsite' or not b else fmt_ratio(ratio(jb, b))} |"
            )
        out += [
            "",
            f"One-at-a-time enqueueing stops after {plan.get('enqueue_cap')} s and is "
            "measured over the calls made by then. Bulk APIs: jobsite `enqueue_many`, "
            "procrastinate `batch_defer`, pgqueuer `enqueue(lists)`; django-tasks-db and "
            "django-q2 have none.",
            "",
        ]

    # (2) drain
    if R.variants("drain", "postgres"):
        out += drain_table(
            R, "drain", "postgres", "2. Drain pre-enqueued no-op jobs (PostgreSQL), jobs/s"
        )

    out += cpu_table(R)

    # (3) latency
    if R.variants("latency", "postgres"):
        out += latency_table(R, "postgres", "3. Wake-up latency (PostgreSQL), enqueue → start, ms")

    # (4) retries
    if R.variants("retry_flaky", "postgres") or R.variants("retry_dead", "postgres"):
        n, c = plan.get("retry_n"), plan.get("retry_concurrency")
        out += [
            f"### 4. Retry-heavy (PostgreSQL), {n:,} jobs, concurrency {c}",
            "",
            "| system | fail once, then succeed: jobs/s | share of its no-op drain | "
            "jobsite ÷ peer | CPU a job, µs (as in 2b) | always fail, 3 attempts: "
            "dead letters/s | jobsite ÷ peer |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        drain_n = max(
            (cell[0] for cell in R.cells("drain", "postgres") if cell[1] == c),
            default=None,
            key=lambda x: -x,
        )  # the smaller drain at this concurrency
        jf = R.median("jobs_per_s", "retry_flaky", "postgres", "jobsite", n=n, c=c)
        jd = R.median("jobs_per_s", "retry_dead", "postgres", "jobsite", n=n, c=c)
        systems = R.variants("retry_flaky", "postgres") or R.variants("retry_dead", "postgres")
        for system, config in systems:
            f = R.median("jobs_per_s", "retry_flaky", "postgres", system, config, n=n, c=c)
            d = R.median("jobs_per_s", "retry_dead", "postgres", system, config, n=n, c=c)
            base = R.median("jobs_per_s", "drain", "postgres", system, config, n=drain_n, c=c)
            share = f"{f / base:.0%}" if f and base else "–"
            cf = R.mark("retry_flaky", "postgres", system, config, n, c)
            cd = R.mark("retry_dead", "postgres", system, config, n, c)
            out.append(
                f"| {label(system, config)} | {fmt_rate(f)}{cf} | {share} | "
                f"{'' if system == 'jobsite' else fmt_ratio(ratio(jf, f))} | "
                f"{cpu_cell(R, 'retry_flaky', system, config, n, c)} | "
                f"{fmt_rate(d)}{cd} | "
                f"{'' if system == 'jobsite' else fmt_ratio(ratio(jd, d))} |"
            )
        out += [
            "",
            "Smallest backoff of each: jobsite `Fixed(0)`, procrastinate "
            "`RetryStrategy(max_attempts=2, wait=0)`, pgqueuer "
            "`DatabaseRetryEntrypointExecutor(max_attempts=2, initial_delay=0)`, django-q2 "
            "re-delivers an unacknowledged task once its lease lapses (`retry` 2 s, the "
            "smallest above `timeout` 1 s; `max_attempts` 3). django-tasks-db has no retries. "
            "Jobs/s counts a job when its last execution started (logical throughput); "
            "† = stopped at the time cap, measured over the jobs completed by then.",
            "",
        ]

    out += mixed_table(R, plan)

    # (4c) async bodies
    if R.variants("await_drain", "postgres"):
        out += drain_table(
            R,
            "await_drain",
            "postgres",
            f"4c. `async def` jobs awaiting {plan.get('async_ms', 100)} ms (PostgreSQL), jobs/s",
        )
        out += [
            "Concurrency here = coroutines in flight: jobsite `--concurrency 2 "
            "--async-concurrency N/2`; procrastinate `concurrency=N` (one process; async tasks "
            "run on its loop); pgqueuer (async) one process with `max_concurrent_tasks=N`, "
            "`batch_size` N/2 at most 100; pgqueuer (async-unbounded) its default, no cap on "
            "the jobs in flight: it starts every due job at once, so it is not a like-for-like "
            "figure (a drain of N jobs is bound by its fetches, not by the await).",
            "",
        ]

    # (5) SQLite
    if R.variants("drain", "sqlite") or R.variants("enqueue", "sqlite"):
        out += ["### 5. SQLite: jobsite against django-tasks-db", ""]
        if R.variants("enqueue", "sqlite"):
            n = plan.get("enqueue_n")
            out += ["| system | enqueue one at a time, jobs/s | bulk, jobs/s |", "|---|---:|---:|"]
            for system, config in R.variants("enqueue", "sqlite"):
                s = R.median("single_per_s", "enqueue", "sqlite", system, config, n=n)
                b = R.median("bulk_per_s", "enqueue", "sqlite", system, config, n=n)
                out.append(
                    f"| {label(system, config)} | {fmt_rate(s)} | "
                    f"{fmt_rate(b) if b else 'no bulk API'} |"
                )
            out.append("")
        if R.variants("drain", "sqlite"):
            out += drain_table(R, "drain", "sqlite", None)
        if R.variants("latency", "sqlite"):
            out += latency_table(R, "sqlite", None)
        out += [
            "django-tasks-db on SQLite: *default* = Django's SQLite defaults (rollback "
            "journal); *fast* = WAL, `synchronous=NORMAL`, `transaction_mode=IMMEDIATE` and "
            "the fast polling flags. jobsite uses its own settings (WAL).",
            "",
        ]

    # (6) memory
    out += memory_table(R)

    out += targets(R)

    if R.failures:
        out += [
            "### Runs that failed",
            "",
            "The measurement is kept (marked ✗ above) and the check's message listed here. "
            "What they mean, from reading the peers' code: *django-tasks-db … left running*: "
            "`db_worker` exits at once on SIGTERM when it is between claiming a task and "
            "starting it, leaving that task `RUNNING` for good (it has no lease recovery); "
            "*pgqueuer … left running (picked)*: jobs a worker had fetched in its batch but "
            "not started stay `picked` after SIGTERM until another worker's heartbeat "
            "timeout (30 s) re-picks them; *django-q2 … executed 3x / 4x*: with the short "
            "`retry` lease a package waiting in the cluster's internal queue is handed out "
            "again, so it runs more often than its attempts allow.",
            "",
        ]
        for f in R.failures:
            first = f["error"].strip().splitlines()
            out.append(f"- **{f['what']}**: {' '.join(x.strip() for x in first[-3:])[:400]}")
        out.append("")
    out += ["![drain and latency](chart.png)", ""]
    return "\n".join(out)


def drain_table(R, scenario, db, title):
    out = []
    if title:
        out += [f"### {title}", ""]
    variants = R.variants(scenario, db)
    head = "| jobs | concurrency | " + " | ".join(label(*v) for v in variants) + " |"
    out += [head, "|---:|---:|" + "---:|" * len(variants)]
    any_capped = False
    ours = next((config for system, config in variants if system == "jobsite"), "default")
    for n, c in R.cells(scenario, db):
        mine = R.median("jobs_per_s", scenario, db, "jobsite", ours, n=n, c=c)
        cells = []
        for system, config in variants:
            x = R.median("jobs_per_s", scenario, db, system, config, n=n, c=c)
            mark = R.mark(scenario, db, system, config, n, c)
            any_capped = any_capped or "†" in mark
            if system == "jobsite" or x is None:
                cells.append(fmt_rate(x) + mark)
            else:
                cells.append(f"{fmt_rate(x)}{mark} ({fmt_ratio(ratio(mine, x))})")
        out.append(f"| {n:,} | {c} | " + " | ".join(cells) + " |")
    out += [
        "",
        "Rate = jobs ÷ time from the first job's start to the last job's start "
        "(worker start-up excluded); in parentheses jobsite ÷ that peer. Concurrency N = "
        "jobsite `--concurrency N` (one process), procrastinate `concurrency=N` (one "
        "process), django-q2 `workers=N` (one cluster), django-tasks-db and pgqueuer N "
        "worker processes."
        + (
            " † = the drain was still running at the time cap and was stopped (SIGTERM): "
            "the rate is over the jobs that ran by then (the queue was still deep)."
            if any_capped
            else ""
        )
        + " ✗ = a correctness check failed in at least one round "
        "(see *Runs that failed*).",
        "",
    ]
    return out


def latency_table(R, db, title):
    out = []
    if title:
        out += [f"### {title}", ""]
    out += [
        "| system | jobs | p50 ms | p99 ms | p50 peer ÷ jobsite | p99 peer ÷ jobsite |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    j50 = j99 = None
    for system, config in R.variants("latency", db):
        rows = [
            r
            for r in R.records
            if r["scenario"] == "latency"
            and r["db"] == db
            and r["system"] == system
            and r["config"] == config
        ]
        if not rows:
            continue
        p50 = statistics.median(r["p50_ms"] for r in rows)
        p99 = statistics.median(r["p99_ms"] for r in rows)
        if system == "jobsite":
            j50, j99 = p50, p99
        r50 = "" if system == "jobsite" else fmt_ratio(ratio(j50, p50, lower_is_better=True))
        r99 = "" if system == "jobsite" else fmt_ratio(ratio(j99, p99, lower_is_better=True))
        bad = " ✗" if any(r.get("problems") for r in rows) else ""
        out.append(
            f"| {label(system, config)}{bad} | {rows[0]['n']} | {p50:,.1f} | {p99:,.1f} | "
            f"{r50} | {r99} |"
        )
    gap = R.meta.get("idle_gap_ms", [5, 15])
    out += [
        "",
        f"One worker (concurrency 1) idles; each job is enqueued {gap[0]:.0f}–{gap[1]:.0f} "
        "ms (uniform) after the previous one started; latency = the job body's start − "
        "the moment the enqueue call began (5 warm-up jobs discarded). Systems that poll "
        "by default (django-tasks-db every 1 s, django-q2 every 0.2 s) run fewer jobs "
        "with their defaults to keep the run short.",
        "",
    ]
    return out


def mixed_table(R, plan):
    db = "postgres"
    if not (R.variants("mixed_drain", db) or R.variants("mixed_paced", db)):
        return []
    n, c, pace = plan.get("mixed_n"), plan.get("mixed_concurrency"), plan.get("mixed_pace")
    best = c / (sum((0.001, 0.010, 0.100)) / 3)
    out = [
        f"### 4b. Mixed 1 / 10 / 100 ms jobs (PostgreSQL), concurrency {c}",
        "",
        f"| system | drain of {n:,}: jobs/s | share of the best possible | jobsite ÷ peer | "
        f"arriving at {pace}/s: pickup p50 ms | p99 ms | p99 peer ÷ jobsite |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]

    def paced(system, config, field):
        rows = [
            r[field]
            for r in R.records
            if r["scenario"] == "mixed_paced"
            and r["db"] == db
            and r["system"] == system
            and r["config"] == config
        ]
        return statistics.median(rows) if rows else None

    mine = R.median("jobs_per_s", "mixed_drain", db, "jobsite", n=n, c=c)
    mine99 = paced("jobsite", "default", "p99_ms")
    seen = R.variants("mixed_drain", db) or R.variants("mixed_paced", db)
    for system, config in seen:
        rate = R.median("jobs_per_s", "mixed_drain", db, system, config, n=n, c=c)
        p50, p99 = paced(system, config, "p50_ms"), paced(system, config, "p99_ms")
        bad = any(
            r.get("problems")
            for r in R.records
            if r["scenario"] == "mixed_paced" and r["system"] == system and r["config"] == config
        )
        vs99 = "" if system == "jobsite" else fmt_ratio(ratio(mine99, p99, lower_is_better=True))
        out.append(
            f"| {label(system, config)} | {fmt_rate(rate)}"
            f"{R.mark('mixed_drain', db, system, config, n, c)} | "
            f"{f'{rate / best:.0%}' if rate else '–'} | "
            f"{'' if system == 'jobsite' else fmt_ratio(ratio(mine, rate))} | "
            f"{'–' if p50 is None else f'{p50:,.1f}'}{' ✗' if bad else ''} | "
            f"{'–' if p99 is None else f'{p99:,.1f}'} | "
            f"{vs99} |"
        )
    out += [
        "",
        f"Job i sleeps 1, 10 or 100 ms (i mod 3) after logging its start: 37 ms on average, "
        f"so {best:,.0f} jobs/s is the best any system can do at concurrency {c}. Drain: "
        f"{n:,} pre-enqueued jobs, rate from the first start to the last. Arriving: {n:,} jobs "
        f"enqueued one by one at a steady {pace}/s into an idle worker (about "
        f"{pace / best:.0%} of that best), pickup = the job's start − the moment its enqueue "
        "call began. A system that holds short jobs behind long ones (a fetched batch run in "
        "order, one process busy while another idles) shows it in the p99. pgqueuer runs the "
        "same synchronous body in its N processes, as in the drains.",
        "",
    ]
    return out


def cpu_cell(R, scenario, system, config, n, c):
    """'system + server (cores busy)' in µs a job, medians of a PostgreSQL cell's rounds."""
    cpus = [r.get("cpu") for r in R.rounds(scenario, "postgres", system, config, n, c)]
    cpus = [x for x in cpus if x and "server_us" in x]
    if not cpus:
        return "–"
    workers = statistics.median(x["workers_us"] for x in cpus)
    server = statistics.median(x["server_us"] for x in cpus)
    busy = statistics.median(x["machine_busy"] or 0 for x in cpus)
    return f"{workers:,.0f} + {server:,.0f} ({busy:.0%})"


def cpu_table(R):
    """CPU a job in the PostgreSQL drains: the system's processes + the server's, medians."""
    cells, rows = R.cells("drain", "postgres"), []
    for system, config in R.variants("drain", "postgres"):
        values = [cpu_cell(R, "drain", system, config, n, c) for n, c in cells]
        if any(v != "–" for v in values):
            rows.append(f"| {label(system, config)} | " + " | ".join(values) + " |")
    if not rows:
        return []
    return [
        "### 2b. CPU a job in those drains (PostgreSQL), µs: the system's processes + the server",
        "",
        "| system | " + " | ".join(f"{n:,}, c{c}" for n, c in cells) + " |",
        "|---|" + "---:|" * len(cells),
        *rows,
        "",
        f"User and system time of every process in the workers' trees and of every PostgreSQL "
        f"server process, from /proc every 0.1 s, between the drain's first and last job start, "
        f"divided by the jobs started meanwhile (medians of the rounds); in parentheses, how "
        f"busy the machine's {R.meta.get('nproc', '?')} cores were meanwhile. A drain whose "
        "cores are all busy goes only as fast as its CPU a job allows: with k cores, at most "
        "k × 1,000,000 ÷ (system + server) jobs/s.",
        "",
    ]


def memory_table(R):
    rows = []
    for db in ("postgres", "sqlite"):
        for system, config in R.variants("drain", db):
            cells = []
            for n, c in R.cells("drain", db):
                cells.append(R.median("peak_rss_mb", "drain", db, system, config, n=n, c=c))
            idle = [
                r["idle_rss_mb"]
                for r in R.records
                if r["scenario"] == "latency"
                and r["db"] == db
                and r["system"] == system
                and r["config"] == config
            ]
            rows.append((db, system, config, cells, statistics.median(idle) if idle else None))
    if not rows:
        return []
    out = ["### 6. Worker memory (RSS summed over the worker process tree), MB", ""]
    for db in ("postgres", "sqlite"):
        cells = R.cells("drain", db)
        mine = [r for r in rows if r[0] == db]
        if not mine:
            continue
        out += [
            f"| {db} | idle (latency run, 1 worker) | "
            + " | ".join(f"drain {n:,} c{c} (peak)" for n, c in cells)
            + " |",
            "|---|---:|" + "---:|" * len(cells),
        ]
        for _, system, config, values, idle in mine:
            out.append(
                f"| {label(system, config)} | {'–' if idle is None else f'{idle:,.0f}'} | "
                + " | ".join("–" if v is None else f"{v:,.0f}" for v in values)
                + " |"
            )
        out.append("")
    out += [
        "Sampled every 0.1 s from /proc (VmRSS of every process in each worker's tree, "
        "summed over the worker processes: 1 for jobsite and procrastinate, N for "
        "django-tasks-db and pgqueuer, the whole cluster for django-q2).",
        "",
    ]
    return out


def met(ok):
    return "met" if ok else "not met"


def targets(R):
    """The performance issue's targets that this run measures (the rest are in baseline.py)."""
    db = "postgres"
    out = ["### Against the targets (durable commits; PostgreSQL unless named)", ""]
    cells = R.cells("drain", db)
    mine = {
        cell: R.median("jobs_per_s", "drain", db, "jobsite", n=cell[0], c=cell[1]) for cell in cells
    }
    drains = [(rate, cell) for cell, rate in mine.items() if rate]
    if drains:
        best, (n, c) = max(drains)
        out.append(
            f"- moonshot {TARGETS['moonshot']:,} no-op jobs/s: best {best:,.0f}/s "
            f"({n:,} jobs, concurrency {c}), {best / TARGETS['moonshot']:.0%} of it"
        )

    def worst_ratio(systems):
        worst = None
        for cell in cells:
            for system, config in R.variants("drain", db):
                if system not in systems:
                    continue
                theirs = R.median("jobs_per_s", "drain", db, system, config, n=cell[0], c=cell[1])
                r = ratio(mine[cell], theirs)
                if r is not None and (worst is None or r < worst[0]):
                    worst = (r, label(system, config), cell)
        return worst

    pgq = worst_ratio({"pgqueuer"})
    if pgq:
        r, who, (n, c) = pgq
        out.append(
            f"- drain ≥ {TARGETS['pgqueuer_ratio']:.1f}× pgqueuer in every cell (its fastest "
            f"durable setting is *fast*): smallest {r:.2f}× ({who}, {n:,} jobs, concurrency {c}) "
            f"— {met(r >= TARGETS['pgqueuer_ratio'])}"
        )
    others = {s for s, _ in R.variants("drain", db)} - {"jobsite", "pgqueuer"}
    rest = worst_ratio(others)
    if rest:
        r, who, (n, c) = rest
        out.append(
            f"- drain ≥ {TARGETS['peer_ratio']}× each other peer ({', '.join(sorted(others))}), "
            f"with its fast settings: smallest {r:.1f}× ({who}, {n:,} jobs, concurrency {c}) — "
            f"{met(r >= TARGETS['peer_ratio'])}"
        )
    n = R.meta.get("plan", {}).get("enqueue_n")
    b = R.median("bulk_per_s", "enqueue", db, "jobsite", n=n)
    b_pgq = R.median("bulk_per_s", "enqueue", db, "pgqueuer", n=n)
    if b and b_pgq:
        out.append(
            f"- `enqueue_many` ≥ {TARGETS['pgqueuer_ratio']:.1f}× pgqueuer's batch insert: "
            f"{b:,.0f} against {b_pgq:,.0f}/s = {b / b_pgq:.2f}× — "
            f"{met(b / b_pgq >= TARGETS['pgqueuer_ratio'])}"
        )
    # The wake-up target is the embedded default's, where a worker once polled.
    lat = [
        r
        for r in R.records
        if r["scenario"] == "latency" and r["db"] == "sqlite" and r["system"] == "jobsite"
    ]
    if lat:
        p50 = statistics.median(r["p50_ms"] for r in lat)
        p99 = statistics.median(r["p99_ms"] for r in lat)
        out.append(
            f"- SQLite wake-up p50 ≤ {TARGETS['p50']} ms / p99 ≤ {TARGETS['p99']} ms: "
            f"{p50:.1f} / {p99:.1f} ms — {met(p50 <= TARGETS['p50'] and p99 <= TARGETS['p99'])}"
        )
    plan = R.meta.get("plan", {})
    rn, rc = plan.get("retry_n"), plan.get("retry_concurrency")
    f = R.median("jobs_per_s", "retry_flaky", db, "jobsite", n=rn, c=rc)
    base_cells = [cell for cell in cells if cell[1] == rc]
    if f and base_cells:
        n0 = min(cell[0] for cell in base_cells)
        base = R.median("jobs_per_s", "drain", db, "jobsite", n=n0, c=rc)
        if base:
            out.append(
                f"- retry-heavy ≥ {TARGETS['retry_share']:.0%} of the no-op drain: "
                f"{f:,.0f} of {base:,.0f} jobs/s = {f / base:.0%} — "
                f"{met(f / base >= TARGETS['retry_share'])}"
            )
    out += [
        "",
        "The single-enqueue target (≥ 0.8× a raw one-row `INSERT` loop), the SQLite drain "
        "against its naive loop, memory and scale are measured by `bench/baseline.py` and "
        "`bench/scale.py`; see the sections above.",
        "",
    ]
    return out


def merge(main_path, supplement_path):
    """Add a supplementary run's records to the main results (written to main_path)."""
    main = json.loads(Path(main_path).read_text())
    sup = json.loads(Path(supplement_path).read_text())
    main["records"] += sup["records"]
    main["failures"] += sup["failures"]
    sm = sup["meta"]
    main["meta"].setdefault("supplements", []).append(
        {
            "started": sm.get("started"),
            "finished": sm.get("finished"),
            "loadavg_start": sm.get("loadavg_start"),
            "duration_s": sm.get("duration_s"),
            "what": sorted({label(r["system"], r["config"]) for r in sup["records"]}),
            "scenarios": sorted({r["scenario"] for r in sup["records"]}),
            "rounds": sm.get("plan", {}).get("rounds"),
            "path": str(supplement_path),
        }
    )
    Path(main_path).write_text(json.dumps(main, indent=1))
    return Path(main_path)


def update_readme(markdown_text):
    """Replace (or append) the "## Side by side" section; other sections are left as they are."""
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == SECTION), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + markdown_text.rstrip("\n") + "\n"
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        new = (
            "\n".join(
                lines[:start]
                + markdown_text.rstrip("\n").splitlines()
                + ([""] if end < len(lines) else [])
                + lines[end:]
            )
            + "\n"
        )
    README.write_text(new)


if __name__ == "__main__":
    import sys

    print(markdown(sys.argv[1]))
