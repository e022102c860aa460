"""CPU time of a drain, split between the system's own processes and the database server.

A drain on a small machine ends up bound by its cores, so a system's rate is about how much CPU
each job costs all its processes together. `CpuMeter` samples, alongside the harness's RSS
sampling, the CPU time (user + system, all threads) of the worker process trees and of every
PostgreSQL server process, and the machine's busy share from /proc/stat. `per_job` then gives
what was spent between the first and the last execution of the drain, interpolated between
samples, so that the workers' start-up (imports, connections) is left out. Linux only; /proc
counts in clock ticks (10 ms), so a short drain's figures carry a few microseconds a job of
rounding.
"""

import os
import time

TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The command name, in parentheses, may hold spaces: split after it.
            fields = f.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def tree_pids(pid):
    """A process and all its descendants (from /proc)."""
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        if p in pids:
            continue
        pids.append(p)
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return pids


def _server_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _comm(p) == "postgres"]


def _machine_busy_idle():
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / TICK, idle / TICK


class CpuMeter:
    """Cumulative CPU seconds of the workers and of the server, sampled over a run."""

    def __init__(self, server=True):
        self.server = server
        # The last CPU seconds read of every process seen, gone ones included: only the
        # differences between samples are read, so a process counts from when it was first seen.
        self.last: dict[str, dict[int, float]] = {"workers": {}, "server": {}}
        self.samples: list[tuple[float, dict[str, float]]] = []

    def sample(self, worker_pids):
        """Read the CPU of `worker_pids` (every process of the workers' trees) and the server."""
        now = time.time()
        groups = {"workers": worker_pids}
        if self.server:
            groups["server"] = _server_pids()
        totals = {}
        for group, pids in groups.items():
            seen = self.last[group]
            for pid in pids:
                secs = _cpu_seconds(pid)
                if secs is not None:
                    seen[pid] = secs
            totals[group] = sum(seen.values())
        totals["busy"], totals["idle"] = _machine_busy_idle()
        self.samples.append((now, totals))

    def _at(self, t, key):
        """The cumulative value of `key` at time t, interpolated between the samples around it."""
        before = [(s, v[key]) for s, v in self.samples if s <= t]
        after = [(s, v[key]) for s, v in self.samples if s >= t]
        if not before or not after:
            return None
        (s0, v0), (s1, v1) = before[-1], after[0]
        return v0 if s1 == s0 else v0 + (v1 - v0) * (t - s0) / (s1 - s0)

    def per_job(self, times, executions_per_job=1):
        """Microseconds of CPU a job, by group, from the first execution in `times` (wall-clock
        start times) to the last one sampled around; and the share of the machine's cores busy
        meanwhile. A stopped run's last executions may come after the last sample: the window
        then ends at that sample, and counts only the executions in it. {} without samples
        around the window."""
        if not times or not self.samples:
            return {}
        start, end = min(times), min(max(times), self.samples[-1][0])
        jobs = sum(1 for t in times if start <= t <= end) / executions_per_job
        if not jobs or end <= start:
            return {}
        out = {}
        for key in self.samples[0][1]:  # the groups sampled ("server" only when asked for)
            a, b = self._at(start, key), self._at(end, key)
            if a is None or b is None:
                return {}
            out[key] = b - a
        result = {"workers_us": out["workers"] * 1e6 / jobs}
        if self.server:
            result["server_us"] = out["server"] * 1e6 / jobs
        total = out["busy"] + out["idle"]
        result["machine_busy"] = out["busy"] / total if total else None
        return result
