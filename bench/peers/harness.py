"""Side-by-side harness: runs jobsite and its Python peers through the same scenarios.

The harness itself needs only the standard library (it runs under jobsite's .venv). Each system
is driven through its adapter module (bench/peers/<name>_adapter.py), executed by the system's
own interpreter: `<python> -m bench.peers.<adapter> <command> --key value ...` prints one
`RESULT {json}` line. Workers are started by the harness, which watches the shared execution log
(see common.py) to know when every job has run, and samples the worker process tree's RSS
and CPU (and the server's CPU, bench/peers/cpu.py).
"""

import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.peers.common import marks_base
from bench.peers.cpu import CpuMeter, tree_pids

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench/results"
PEERS_DIR = ROOT / "bench/.peers"
# Prepended to every scratch database's name, so runs sharing one server keep apart.
BENCH_DB_PREFIX = os.environ.get("BENCH_DB_PREFIX", "")

T0 = time.monotonic()


def log(text):
    elapsed = time.monotonic() - T0
    print(f"[{int(elapsed // 60):3d}:{int(elapsed % 60):02d}] {text}", flush=True)


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- systems and variants


class Variant:
    """A system on a database with one of its configurations."""

    def __init__(self, spec_cls, db, config):
        self.spec_cls, self.db, self.config = spec_cls, db, config
        key = spec_cls.name.replace("-", "_")
        if db == "postgres":
            url = f"postgres://postgres@127.0.0.1:5432/{BENCH_DB_PREFIX}bench_{key}"
        else:
            url = f"sqlite:///{RESULTS / 'sqlite' / (key + '.sqlite3')}"
        self.spec = spec_cls(url)
        self.name = spec_cls.name

    @property
    def label(self):
        return self.name + ("" if self.config == "default" else f" ({self.config})")

    def env(self, mode="ok", concurrency=1, exec_log=None, mark_dir=None):
        env = dict(os.environ)
        for key in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV"):
            env.pop(key, None)
        env.update(
            {
                "PYTHONPATH": str(self.cwd),
                "BENCH_MODE": mode,
                "BENCH_EXEC_LOG": str(exec_log or "/dev/null"),
                "BENCH_MARK_DIR": str(mark_dir or "/tmp"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.spec.env(self.config, concurrency=concurrency, retry=mode != "ok"))
        return env

    @property
    def cwd(self):
        return getattr(self.spec, "cwd", None) or ROOT

    def driver(self, command, env=None, timeout=1800, **opts):
        argv = [self.spec.python, "-m", self.spec.module, command]
        for key, value in opts.items():
            argv += [f"--{key}", str(value)]
        proc = subprocess.run(
            argv,
            cwd=self.cwd,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        for line in reversed(proc.stdout.splitlines()):
            if line.startswith("RESULT ") and proc.returncode == 0:
                return json.loads(line[7:])
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
        raise BenchError(
            f"{self.label} {command} failed (exit {proc.returncode}):\n    " + "\n    ".join(tail)
        )


def load_specs():
    from bench.peers import (
        djq2_adapter,
        dtdb_adapter,
        jobsite_adapter,
        pgqueuer_adapter,
        procrastinate_adapter,
    )

    return {
        s.Spec.name: s.Spec
        for s in (
            jobsite_adapter,
            dtdb_adapter,
            procrastinate_adapter,
            djq2_adapter,
            pgqueuer_adapter,
        )
    }


def installed(spec_cls):
    return Path(spec_cls.python).exists()


# ---------------------------------------------------------------- process helpers


def tree_rss(pid):
    """Resident set size of a process and all its descendants, in bytes (from /proc)."""
    return rss(tree_pids(pid))


def rss(pids):
    """Resident set size of the processes `pids`, summed, in bytes (from /proc)."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


class ExecLog:
    """Incremental reader of the execution log: counts lines without rereading the file."""

    def __init__(self, path):
        self.path, self.offset, self.lines = Path(path), 0, 0

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.lines
        end = data.rfind(b"\n") + 1
        self.lines += data.count(b"\n", 0, end)
        self.offset += end
        return self.lines

    def parse(self):
        counts, starts = Counter(), {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                i, t = line.split()
                i, t = int(i), float(t)
                counts[i] += 1
                starts.setdefault(i, t)
                starts[i] = min(starts[i], t)
        return counts, starts

    def times(self):
        if not self.path.exists():
            return []
        return [float(line.split()[1]) for line in self.path.read_text().splitlines()]


def stop(procs, grace=20):
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def run_workers(variant, concurrency, expected, env, timeout, burst=True, logfile=None, cap=None):
    """Start the variant's worker(s), wait until `expected` executions are logged (and, for
    burst-capable systems, until the workers exit by themselves), sampling RSS and CPU. With `cap`,
    stop the workers gracefully (SIGTERM) once `cap` seconds have passed since the first
    execution: the run is then "capped" and measured over what ran."""
    exec_log = ExecLog(env["BENCH_EXEC_LOG"])
    # Held open for the workers' whole run and closed once they have exited.
    out = open(logfile, "ab") if logfile else subprocess.DEVNULL  # noqa: SIM115
    burst = burst and variant.spec.burst
    cmds = variant.spec.worker_cmds(variant.config, concurrency, burst)
    started = time.monotonic()
    procs = [
        subprocess.Popen(
            cmd, cwd=variant.cwd, env=env, stdout=out, stderr=out, start_new_session=True
        )
        for cmd in cmds
    ]
    peak, self_exit, reached_at, first_at, capped = 0, None, None, None, False
    cpu = CpuMeter(server=variant.db == "postgres")
    try:
        while True:
            trees = [pid for p in procs for pid in tree_pids(p.pid)]
            peak = max(peak, rss(trees))
            cpu.sample(trees)
            count = exec_log.poll()
            if count and first_at is None:
                first_at = time.monotonic()
            if cap and first_at and count < expected and time.monotonic() - first_at > cap:
                capped = True
                break
            done = count >= expected
            if done and reached_at is None:
                reached_at = time.monotonic()
            alive = [p for p in procs if p.poll() is None]
            if done and (not burst or not alive):
                if not burst:
                    time.sleep(1.0)  # long enough to see a duplicate execution, if any
                self_exit = burst
                break
            if not alive:
                time.sleep(0.5)
                if exec_log.poll() >= expected:
                    continue
                codes = [p.returncode for p in procs]
                raise BenchError(
                    f"{variant.label}: workers exited ({codes}) after "
                    f"{exec_log.poll()}/{expected} executions"
                )
            if reached_at and time.monotonic() - reached_at > 60:
                raise BenchError(
                    f"{variant.label}: burst workers did not exit 60 s after the last job"
                )
            if time.monotonic() - started > timeout:
                raise BenchError(
                    f"{variant.label}: timeout after {timeout} s with "
                    f"{exec_log.poll()}/{expected} executions"
                )
            time.sleep(0.1)
    finally:
        stop(procs, grace=getattr(variant.spec, "stop_grace", 20))
        if logfile:
            out.close()
    bad = [p.returncode for p in procs if p.returncode not in (0, -signal.SIGTERM, 143, 1)]
    return {
        "wall_s": time.monotonic() - started,
        "peak_rss_mb": peak / 2**20,
        "self_exit": self_exit,
        "exit_codes": [p.returncode for p in procs],
        "bad": bad,
        "capped": capped,
        "cpu": cpu,
    }


# ---------------------------------------------------------------- measurements


class Run:
    """One harness run: where scratch files go, and every record measured."""

    def __init__(self, quick):
        self.quick = quick
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.dir = RESULTS / f"run-{stamp}"
        self.dir.mkdir(parents=True, exist_ok=True)
        (RESULTS / "sqlite").mkdir(parents=True, exist_ok=True)
        self.records, self.failures, self.counter = [], [], 0
        self.templates = {}
        self.meta = {}

    def scratch(self):
        self.counter += 1
        d = self.dir / f"m{self.counter:04d}"
        d.mkdir()
        return d

    def record(self, rec):
        self.records.append(rec)
        self.save()

    def fail(self, what, error):
        log(f"   !! {what}: {error}")
        self.failures.append({"what": what, "error": str(error)})
        self.save()

    def save(self):
        data = {"meta": self.meta, "records": self.records, "failures": self.failures}
        text = json.dumps(data, indent=1)
        (self.dir / "results.json").write_text(text)
        (RESULTS / "latest.json").write_text(text)


def verify(variant, counts, n, per_job, check, capped=False):
    """Each job id 0..n-1 executed exactly `per_job` times (capped run: at most `per_job`
    times), and nothing left running (nor, in a complete run, waiting)."""
    if capped:
        wrong = [i for i, c in counts.items() if c > per_job]
    else:
        wrong = [i for i in range(n) if counts.get(i, 0) != per_job]
    extra = set(counts) - set(range(n))
    problems = []
    if wrong:
        sample = ", ".join(f"{i}:{counts.get(i, 0)}" for i in wrong[:5])
        problems.append(f"{len(wrong)} job ids not executed exactly {per_job}x (e.g. {sample})")
    if extra:
        problems.append(f"{len(extra)} unknown job ids executed")
    lease_kept = capped and getattr(variant.spec, "lease_on_stop", False)
    if check.get("in_progress") and not lease_kept:
        problems.append(f"{check['in_progress']} left running: {check['states']}")
    if check.get("pending") and not capped:
        problems.append(f"{check['pending']} left waiting: {check['states']}")
    return problems


def flag(run, what, variant, problems):
    """A correctness problem is reported (and listed in the README) but the measurement is
    kept, marked, so that the table shows what the system did."""
    if problems:
        run.fail(what, f"{variant.label}: correctness check failed: " + "; ".join(problems))


def measure_enqueue(run, variant, n, rnd, cap=None):
    scratch = run.scratch()
    env = variant.env(exec_log=scratch / "exec.log")
    out = {
        "scenario": "enqueue",
        "system": variant.name,
        "config": variant.config,
        "db": variant.db,
        "n": n,
        "round": rnd,
    }
    variant.driver("reset", env=env)
    single = variant.driver("enqueue", env=env, mode="single", n=n, cap=cap or "")
    out["single_per_s"] = single["count"] / single["seconds"]
    out["single_count"] = single["count"]
    if variant.spec.bulk:
        variant.driver("reset", env=env)
        bulk = variant.driver("enqueue", env=env, mode="bulk", n=n)["seconds"]
        out["bulk_per_s"] = n / bulk
    run.record(out)
    bulk_text = f", bulk {out['bulk_per_s']:,.0f}/s" if "bulk_per_s" in out else ", no bulk API"
    log(
        f"   {variant.label:28s} single {out['single_per_s']:,.0f}/s "
        f"({single['count']} calls){bulk_text}"
    )


# -- pre-enqueued queues: filled once per (system, task, n) into a template database, then
# -- cloned for every measurement (CREATE DATABASE ... TEMPLATE), so that filling 100,000 jobs
# -- is not repeated each round.


def _pg_admin(*statements):
    import psycopg

    from bench.peers.common import PG_ADMIN

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql)


def _dbname(variant):
    return variant.spec.db_url.rsplit("/", 1)[1]


def prefill(run, variant, n, task):
    """Give the variant's database a queue of n pre-enqueued jobs. Returns the fill seconds
    (of the template's one fill, on PostgreSQL)."""
    env = variant.env()
    if variant.db != "postgres":
        variant.driver("reset", env=env)
        return variant.driver("enqueue", env=env, mode="fill", n=n, task=task)["seconds"]
    key = (variant.name, task, n)
    db, template = _dbname(variant), f"{_dbname(variant)}_t_{task}_{n}"
    if key not in run.templates:
        variant.driver("reset", env=env)
        secs = variant.driver("enqueue", env=env, mode="fill", n=n, task=task)["seconds"]
        _pg_admin(
            f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)',
            f'CREATE DATABASE "{template}" TEMPLATE "{db}" STRATEGY FILE_COPY',
        )
        run.templates[key] = secs
        log(
            f"   ({variant.name}: filled {n:,} {task} jobs once in {secs:.1f} s, "
            f"{n / secs:,.0f}/s; cloned for each run)"
        )
    _pg_admin(
        f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)',
        f'CREATE DATABASE "{db}" TEMPLATE "{template}" STRATEGY FILE_COPY',
    )
    return run.templates[key]


def measure_drain(run, variant, n, concurrency, rnd, mode="ok", timeout=1800, cap=None):
    scratch = run.scratch()
    mark = Path(tempfile.mkdtemp(prefix="bench-marks-", dir=marks_base()))
    exec_path = scratch / "exec.log"
    env = variant.env(mode=mode, concurrency=concurrency, exec_log=exec_path, mark_dir=mark)
    task = {"flaky": "retried", "fail": "retried", "await": "awaiting"}.get(mode, "noop")
    per_job = {"ok": 1, "mixed": 1, "await": 1, "flaky": 2, "fail": 3}[mode]
    fill = prefill(run, variant, n, task)
    # Retry runs: the harness stops the workers (a burst worker may exit while the last
    # retries are being scheduled, which would not be the system's fault).
    w = run_workers(
        variant,
        concurrency,
        n * per_job,
        env,
        timeout,
        burst=mode in ("ok", "mixed", "await"),
        logfile=scratch / "worker.log",
        cap=cap,
    )
    log_reader = ExecLog(exec_path)
    counts, _ = log_reader.parse()
    times = log_reader.times()
    check = variant.driver("check", env=env)
    problems = verify(variant, counts, n, per_job, check, capped=w["capped"])
    shutil.rmtree(mark, ignore_errors=True)
    span = max(times) - min(times)
    completed = sum(1 for c in counts.values() if c == per_job)
    rate = completed / span if span > 0 else float("inf")
    scenario = SCENARIO_OF_MODE[mode]
    rec = {
        "scenario": scenario,
        "system": variant.name,
        "config": variant.config,
        "db": variant.db,
        "n": n,
        "concurrency": concurrency,
        "round": rnd,
        "jobs_per_s": rate,
        "completed": completed,
        "capped": w["capped"],
        "executions_per_s": len(times) / span if span else None,
        "span_s": span,
        "fill_s": fill,
        "wall_s": w["wall_s"],
        "peak_rss_mb": w["peak_rss_mb"],
        "cpu": w["cpu"].per_job(times, per_job),
        "states": check["states"],
        "exit_codes": w["exit_codes"],
        "problems": problems,
    }
    run.record(rec)
    flag(run, f"{scenario} {n} c{concurrency} {variant.label} ({variant.db})", variant, problems)
    unit = {"flaky": "jobs/s (logical)", "fail": "dead letters/s"}.get(mode, "jobs/s")
    how = f"capped at {cap:.0f} s: {completed:,}/{n:,} done" if w["capped"] else f"all {n:,} done"
    log(
        f"   {variant.label:28s} {rate:>9,.0f} {unit:16s} span {span:6.2f} s  "
        f"RSS {w['peak_rss_mb']:5.0f} MB  {how}, "
        + ("CHECK FAILED" if problems else f"exactly-{per_job}x ok")
        + cpu_text(rec["cpu"])
    )


def cpu_text(cpu):
    if not cpu:
        return ""
    server = f" + server {cpu['server_us']:,.0f}" if "server_us" in cpu else ""
    busy = cpu.get("machine_busy")
    cores = f", cores {busy:.0%} busy" if busy is not None else ""
    return f"; CPU a job: workers {cpu['workers_us']:,.0f}{server} µs{cores}"


SCENARIO_OF_MODE = {
    "ok": "drain",
    "mixed": "mixed_drain",
    "await": "await_drain",
    "flaky": "retry_flaky",
    "fail": "retry_dead",
}


def measure_latency(run, variant, n, rnd, warmup=5, concurrency=1, pace=None):
    """Enqueue to start, into an idle worker; with `pace` (jobs/s), the mixed workload arriving
    at that steady rate at `concurrency`."""
    scratch = run.scratch()
    exec_path = scratch / "exec.log"
    mode = "mixed" if pace else "ok"
    env = variant.env(mode=mode, concurrency=concurrency, exec_log=exec_path)
    if pace:
        env["BENCH_PACE"] = str(pace)
    variant.driver("reset", env=env)
    cmds = variant.spec.worker_cmds(variant.config, concurrency, burst=False)
    out = open(scratch / "worker.log", "ab")  # noqa: SIM115 - closed after the worker exits
    procs = [
        subprocess.Popen(
            cmd, cwd=variant.cwd, env=env, stdout=out, stderr=out, start_new_session=True
        )
        for cmd in cmds
    ]
    try:
        time.sleep(2.0)  # let the worker start and go idle
        stamps = variant.driver("latency", env=env, n=n + warmup)["stamps"]
        time.sleep(0.5)
        idle_rss = sum(tree_rss(p.pid) for p in procs) / 2**20
    finally:
        stop(procs, grace=getattr(variant.spec, "stop_grace", 20))
        out.close()
    counts, starts = ExecLog(exec_path).parse()
    check = variant.driver("check", env=env)
    problems = verify(variant, counts, n + warmup, 1, check)
    lat = sorted((starts[i] - stamps[i]) * 1000 for i in range(warmup, n + warmup))
    p50 = statistics.median(lat)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    scenario = "mixed_paced" if pace else "latency"
    run.record(
        {
            "scenario": scenario,
            "system": variant.name,
            "config": variant.config,
            "db": variant.db,
            "n": n,
            "concurrency": concurrency,
            "pace": pace,
            "round": rnd,
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": lat[-1],
            "idle_rss_mb": idle_rss,
            "problems": problems,
        }
    )
    flag(run, f"{scenario} {variant.label} ({variant.db})", variant, problems)
    log(
        f"   {variant.label:28s} p50 {p50:8.2f} ms  p99 {p99:8.2f} ms  max {lat[-1]:8.1f} ms"
        f"  ({n} jobs)"
    )


def attempt(run, what, fn, *args, **kwargs):
    try:
        fn(run, *args, **kwargs)
    except (BenchError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
        run.fail(what, e)


# ---------------------------------------------------------------- environment


def machine_info():
    info = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }
    try:
        mem = Path("/proc/meminfo").read_text().split("\n")[0].split()[1]
        info["mem_gb"] = round(int(mem) / 2**20, 1)
        info["cpu"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    try:
        out = subprocess.run(
            [
                "psql",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-Atc",
                "SELECT version(); SHOW synchronous_commit; SHOW fsync;",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.split("\n")
        info["postgres"] = out[0].split(" on ")[0]
        info["synchronous_commit"], info["fsync"] = out[1], out[2]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        pass
    return info


def versions(specs):
    found = {}
    for name, spec in specs.items():
        if name == "jobsite":
            req = ROOT / "requirements.txt"
        else:
            req = ROOT / f"bench/requirements-{spec.venv}.txt"
        pins = {}
        if req.exists():
            for line in req.read_text().splitlines():
                if "==" in line and not line.startswith("#"):
                    k, v = line.split("==", 1)
                    pins[k.strip().lower()] = v.strip()
        py = (
            subprocess.run(
                [spec.python, "-c", "import sys; print(sys.version.split()[0])"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            if installed(spec)
            else None
        )
        key = {
            "jobsite": "django",
            "django-tasks-db": "django-tasks-db",
            "procrastinate": "procrastinate",
            "django-q2": "django-q2",
            "pgqueuer": "pgqueuer",
        }[name]
        found[name] = {
            "version": pins.get(key.split("[")[0]),
            "python": py,
            "django": pins.get("django"),
            "notes": spec.notes,
        }
    return found
