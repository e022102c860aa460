"""The dispatcher: the jobs claimed and ready to go out, and which executor each goes to.

Only the dispatcher changes which jobs are ready; the worker and the supervisor ask it.
"""

import math
import time
from collections import deque

from ..limits import RATE_SLACK_TO_WAIT

# Dispatch: a job waits behind another in an executor only when both are known short.
SHORT_JOB = 0.005  # seconds: a task whose average attempt is below this is "short"
PREFETCH_BUDGET = 0.02  # seconds of short work that may wait behind an executor's current job
# Jobs that may wait behind an executor's current job. Each finish-and-claim transaction
# serves the jobs of one such round, so this count sets how far its fixed cost (the commit)
# is shared: 256 against 64 drained no-op jobs 65 % faster at concurrency 1 and 17 % at 4
# (bench/README.md). A queue this long of no-op jobs is about 30 ms of an executor's time.
MAX_PREFETCH = 256
SEEN_BEFORE_SHORT = 3  # attempts of a task seen before it may count as short
# Claim ahead for coroutines: a claim counts as room the slots of the coroutines expected to end
# (by the average attempt of their task and when they started) before the claimed jobs arrive
# (the worker's recent claim round trip, at most MAX_ROUND_TRIP) plus AHEAD_BUDGET. A coroutine
# sent to an executor whose slots are all taken waits there, expected for at most AHEAD_BUDGET,
# and starts the moment a slot frees; one that has waited longer than AHEAD_LIMIT (the estimate
# was wrong) is taken back and handed back.
AHEAD_BUDGET = 0.1  # seconds
AHEAD_LIMIT = 0.25  # seconds
MAX_ROUND_TRIP = 0.5  # seconds


class Dispatcher:
    """Hands claimed jobs to executors: a sync job to an idle one, or behind known-short sync
    jobs only; a coroutine to an executor holding no sync job and a free async slot, or a slot
    expected to free within AHEAD_BUDGET, the fullest such executor first, so that the others
    stay idle for sync jobs.

    A job that can start nowhere now is handed back (see `dispatch`), so a job the database
    shows as running is running, or starts within a dispatch round trip (a coroutine: within
    AHEAD_LIMIT, see `jobs.pool.supervisor`). A sync job handed back because coroutines hold
    every executor holds one back for it (`held_back`): no coroutine joins that one, and the
    worker claims only for places a sync job can start in until one is idle, so the sync job,
    first in claim order, is claimed again and starts there.
    """

    def __init__(self, executors):
        self.executors = executors
        self.ready = deque()
        self.seq = 0
        # task path -> [average attempt seconds (EWMA), attempts seen]
        self.durations: dict[str, list] = {}
        # Average of recent attempts of any sync task: how much to claim ahead.
        self.recent = 0.02
        # task path -> whether it is an async def task (run as a coroutine)
        self.coroutine_tasks: dict[str, bool] = {}
        # Share of coroutines among recent claims (EWMA): which slots a claim can expect to
        # fill, sync or async, before the jobs' tasks are known. With no claim seen it is
        # none: claims are sized for sync jobs (never more than can start). Kept as a sum and
        # the weight the claims seen make up, so that the first claims count in full: from a
        # start at none, one coroutine claimed left the share at 0.2, too low to claim for the
        # free slots beside it, and so it never grew.
        self._share_sum = self._share_weight = 0.0
        # The executor no coroutine joins: a sync job found every executor holding coroutines.
        self.held_back = None
        # Seconds the worker's recent claims took to come back (EWMA).
        self.round_trip = 0.0

    def is_coroutine(self, task_path: str) -> bool:
        known = self.coroutine_tasks.get(task_path)
        if known is None:
            from ..runner import is_coroutine_task

            known = self.coroutine_tasks[task_path] = is_coroutine_task(task_path)
        return known

    @property
    def async_share(self) -> float:
        return self._share_sum / self._share_weight if self._share_weight else 0.0

    def add(self, claimed):
        """A job just claimed: ready to go out."""
        coroutine = 1.0 if self.is_coroutine(claimed.task_path) else 0.0
        self._share_sum = 0.8 * self._share_sum + 0.2 * coroutine
        self._share_weight = 0.8 * self._share_weight + 0.2
        self.ready.append(claimed)

    def put_back(self, jobs):
        """Jobs taken back from an executor that never started them: first in line again, in
        their order."""
        self.ready.extendleft(reversed(jobs))

    def withdraw(self, claimed) -> bool:
        """Take a ready job out of line (cancelled, or its lease lost); False if not waiting."""
        if claimed not in self.ready:
            return False
        self.ready.remove(claimed)
        return True

    def take_all(self) -> list:
        """Every job waiting to go out, taken out of line (the worker stops)."""
        jobs = list(self.ready)
        self.ready.clear()
        return jobs

    def can_begin(self) -> int:
        """How many more jobs could begin at once: idle executors not already spoken for."""
        return sum(1 for e in self.executors if e.idle and not e.broken) - len(self.ready)

    def prefetching(self) -> bool:
        """Whether sync jobs wait behind a running one somewhere (the loop looks again within
        the prefetch budget)."""
        return any(len(e.inflight) > 1 and not e.coroutines for e in self.executors)

    def claim_took(self, seconds: float):
        """A claim (with the outcomes written in its transaction) took `seconds`."""
        self.round_trip = 0.8 * self.round_trip + 0.2 * min(seconds, MAX_ROUND_TRIP)

    def observe(self, task_path: str, duration: float):
        duration = max(duration, 0.0)
        seen = self.durations.get(task_path)
        if seen is None:
            self.durations[task_path] = [duration, 1]
        else:
            seen[0] = 0.8 * seen[0] + 0.2 * duration
            seen[1] += 1
        if not self.coroutine_tasks.get(task_path):
            self.recent = 0.9 * self.recent + 0.1 * duration

    def short_estimate(self, task_path: str) -> float | None:
        """The expected seconds of an attempt of a task known to be short, else None."""
        seen = self.durations.get(task_path)
        if seen is None or seen[1] < SEEN_BEFORE_SHORT or seen[0] >= SHORT_JOB:
            return None
        return seen[0]

    def _prefetch(self) -> int:
        if self.recent >= SHORT_JOB:
            return 0
        return min(MAX_PREFETCH, int(PREFETCH_BUDGET / max(self.recent, 1e-5)))

    def room(self) -> int:
        """How many more jobs could start now or queue behind known-short ones: the sync and
        async room weighed by the recent share of coroutines."""
        prefetch = self._prefetch()
        free = free_async = 0
        now = time.monotonic()
        holding = self._holding_back()
        for e in self.executors:
            if e.broken:
                continue
            if e.idle:
                free += 1 + prefetch
            elif prefetch and e.only_short():
                free += max(0, 1 + prefetch - len(e.inflight))
            if self.async_share and not holding:
                free_async += self.async_room(e, now)
        if holding:
            # Claims meant for coroutines would take the sync job again, first in claim order,
            # to hand it back again: claim only where it can start.
            return free - len(self.ready)
        return self._blend(free, free_async) - len(self.ready)

    def total_capacity(self) -> int:
        return self._blend(
            (1 + self._prefetch()) * len(self.executors),
            sum(e.async_slots for e in self.executors),
        )

    def has_free_place(self) -> bool:
        """Whether a claimed job can start now without waiting for a batch's worth of room:
        an executor is idle, or (when most jobs are coroutines) has room for a coroutine,
        since coroutines free their slots one by one."""
        coroutines = self.async_share >= 0.5 and not self._holding_back()
        now = time.monotonic()
        return any(
            not e.broken and (e.idle or (coroutines and self.async_room(e, now)))
            for e in self.executors
        )

    def async_room(self, executor, now) -> int:
        """How many more coroutines the executor can take: its free slots, plus the slots of
        the coroutines expected to end before a claim made now comes back plus AHEAD_BUDGET,
        less those already waiting there.

        Read from the slots the child shares, not from the outcomes received: a slot freed
        while the worker was busy counts at once.
        """
        if (
            executor.broken
            or executor.unwinding
            or executor.holds_sync()
            or executor is self.held_back
        ):
            return 0
        started = executor.started()
        ahead = 0
        horizon = self.round_trip + AHEAD_BUDGET
        for seq, began in started.items():
            seen = self.durations.get(executor.inflight[seq].task_path)
            # Known, ends within the horizon, and is not overdue by more than the budget (a
            # coroutine that hangs keeps its slot: nothing waits behind it).
            if seen and seen[1] >= SEEN_BEFORE_SHORT:
                ends_in = began + seen[0] - now
                ahead += -AHEAD_BUDGET <= ends_in <= horizon
        room = executor.async_slots - len(started) - len(executor.waiting()) + ahead
        return max(0, room)

    def _blend(self, sync: int, coroutines: int) -> int:
        return round(self.async_share * coroutines + (1 - self.async_share) * sync)

    def _coroutine_target(self, rooms):
        """The executor with room for a coroutine that runs the most already (a slot free
        now before one expected to free): coroutines keep to the fewest executors, and the
        others stay idle for sync jobs."""
        fits = [e for e, room in rooms.items() if room > 0]
        target = min(fits, key=lambda e: (e.idle, not e.free_async_slots(), rooms[e]), default=None)
        if target is not None:
            rooms[target] -= 1
        return target

    def held_for_sync(self):
        """The executor held back for a sync job (it takes no coroutine until the job starts
        there), or None."""
        return self.held_back if self._holding_back() else None

    def _holding_back(self) -> bool:
        """Whether an executor is held back for a sync job and is not idle yet (once idle, the
        sync job can start there, or anything else if another worker took it)."""
        held = self.held_back
        if held is not None and (held.idle or held.broken or held not in self.executors):
            self.held_back = held = None
        return held is not None

    def _hold_back_for_sync(self, now):
        """A sync job found no place: hold back the executor of coroutines expected to be
        done first (the fewest coroutines when their lengths are unknown)."""
        if self._holding_back():
            return
        candidates = [e for e in self.executors if not e.broken and e.coroutines]
        candidates = [e for e in candidates if not e.holds_sync()]
        self.held_back = min(
            candidates, key=lambda e: (self._done_at(e, now), len(e.inflight)), default=None
        )

    def _done_at(self, executor, now) -> float:
        """When (monotonic) the coroutines in the executor are expected to be done; infinity
        if the length of any of their tasks is not known."""
        started = executor.started()
        done = now
        for seq, claimed in executor.inflight.items():
            seen = self.durations.get(claimed.task_path)
            if not seen or seen[1] < SEEN_BEFORE_SHORT:
                return math.inf
            done = max(done, started.get(seq, now) + seen[0])
        return done

    def _target(self, estimate):
        idle = next((e for e in self.executors if e.idle and not e.broken), None)
        if idle is not None or estimate is None:
            return idle
        fits = [
            e
            for e in self.executors
            if not e.broken
            and e.only_short()
            and len(e.inflight) <= MAX_PREFETCH
            and e.queued_seconds() + estimate <= PREFETCH_BUDGET
        ]
        return min(fits, key=lambda e: len(e.inflight), default=None)

    def dispatch(self) -> list:
        """Send what can start; return the claimed jobs that must be handed back unstarted.

        Jobs go out in claim (priority) order. One that fits nowhere — no executor is idle,
        and no executor runs only known-short jobs that will be done within the prefetch
        budget — is handed back rather than left waiting in `running`.
        """
        waiting: deque = deque()
        sync_full = async_full = False  # a job of that kind found no place: nor will the next
        rooms = None  # executor -> room for coroutines, read once per round
        while self.ready and not (sync_full and async_full):
            claimed = self.ready.popleft()
            coroutine = self.is_coroutine(claimed.task_path)
            estimate = target = None
            if coroutine and not async_full:
                if rooms is None:
                    now = time.monotonic()
                    rooms = {e: self.async_room(e, now) for e in self.executors}
                target = self._coroutine_target(rooms)
                async_full = target is None
            elif not coroutine and not sync_full:
                # A job under a rate limit with a short slack must begin at once (jobs.limits):
                # never queued behind.
                at_once = claimed.start_by and claimed.rate_slack < RATE_SLACK_TO_WAIT
                estimate = None if at_once else self.short_estimate(claimed.task_path)
                target = self._target(estimate)
                sync_full = target is None
            if target is None:
                waiting.append(claimed)
                if not coroutine:
                    self._hold_back_for_sync(time.monotonic())
                    if rooms is not None and self.held_back is not None:
                        rooms[self.held_back] = 0
                continue
            self.seq += 1
            target.send(self.seq, claimed, estimate, coroutine)
            if not coroutine:
                self.held_back = None  # a sync job found its place
                if rooms is not None:
                    rooms[target] = 0  # it holds a sync job now: no coroutine joins it
        waiting.extend(self.ready)
        self.ready = waiting
        for executor in self.executors:
            executor.flush()
        if not self.ready:
            return []
        now = time.monotonic()
        if any(self._drains_soon(e, now) for e in self.executors):
            # An executor runs only known-short jobs, none of them late: it is free within the
            # prefetch budget, so what waits here starts within the dispatch round trip.
            return []
        give_back = list(self.ready)
        self.ready.clear()
        return give_back

    @staticmethod
    def _drains_soon(executor, now) -> bool:
        if executor.broken or not executor.only_short():
            return False
        running = executor.running()
        return running is None or now - running[1] <= PREFETCH_BUDGET
