"""The claim under flow-control limits: a held job is never claimed, so it uses no attempt.

Only claims made while some limit is in force come here (Engine.claim_within); the others
keep their one statement. In one transaction, round after round until the batch is full or
nothing due is left:

1. read due jobs in claim order, leaving out every budget already found full;
2. take the budgets those jobs draw on that this claim does not hold yet: on PostgreSQL a
   transaction-scoped advisory lock each — the first round's in key order, waiting for a claim
   that holds one (claims of a busy budget take turns, none comes back empty-handed); later
   rounds only try (`pg_try_advisory_xact_lock`; a budget another claim holds is left alone
   this time), so no two claims ever wait on each other; on SQLite the write lock every claim
   already holds;
3. count, for each new budget, its running jobs (the job table is the truth: a finish, a
   release or a recovery frees a slot by changing the row, nothing else to keep in step) and its
   starts within the rate window;
4. take each job whose budgets all have room, in claim order, and claim them by id.

Rate starts: each claimed job under a rate limit gets a slack (jobs.limits.rate_slack), and the
worker hands it back unstarted if it cannot begin within it; that release deletes the job's
starts in the finish's transaction (Engine.after_finish), giving its budgets the room back: a
start that never happened needs no counting. A start is recorded in
jobs_limitstart as its latest moment, claim time + slack (the `started_at` column), brought
forward to the finish of its attempt when that comes first (the job began before it finished),
and counts in a window of `seconds` while that moment is within the last `seconds`. That is
exact whatever each job's slack: every stored moment is no earlier than the job's real begin,
so if some window held more than the limit's starts, the last of them to be claimed saw all
the others' moments within `seconds` before its claim, and so counted them. So a claim
gives a long slack while a budget is far from its limit (its jobs may then wait
behind others, taken like unlimited ones) and a short one near it (so starts leave the count
soon). A job whose slack is too short to wait behind others is taken only for an executor free
to begin it (`can_begin`).

While a budget's window holds at most a tenth of its limit, a claim records the starts its jobs
make there as one row (`starts` of them, at the latest of their moments, no job id): these are
neither given back nor brought forward, so they count at most a window and a slack, which still
never counts a start too few.

Turns between limit keys: while a `key:` limit is in force, or jobs with a limit key wait
without one (their turn claims come here then, with no budget to count; the claims between
turns are the one statement), the first round also reads the first due jobs of each limit key
(a loose scan of the job_claimable_key index, KEYS_PER_CLAIM keys at a time, the next ones at
the next turn; each worker at most every jobs.limits.TURNS_EVERY), and jobs of equal priority
are taken one per key in turn (the first job of every key, then the second of every key, ...;
each round to the keys this worker served longest ago first, so that claims of one job each go
round the keys), and a key's backlog never hides another key's jobs whether or not its limit
is reached.

Holding a budget's lock until commit makes the count and the claim one step: the next claim
of that budget counts this claim's jobs. Budgets found full, and those whose jobs must begin
at once when no executor is free to begin them, are excluded from the next round's read, so a
held backlog never hides jobs under other budgets (no head-of-line blocking).
"""

import json
import time
import uuid
import zlib
from collections import defaultdict
from typing import Any

from django.db import connection, transaction

from ..limits import RATE_BULK_SHARE, RATE_ROOMY_SHARE, RATE_SLACK_TO_WAIT, rate_slack
from ..states import CLAIMABLE, JobState
from .sql import JOB, PAUSED, STARTS, parse_uuid, sql_in, sql_state

# Namespace of jobsite's advisory locks (the first key of the two-key form).
LOCK_SPACE = 0x6A0B
# After a claim that counted after claiming had to be undone, claims count first this long.
COUNT_FIRST_AFTER_UNDO = 1.0
# Rounds one claim makes at most (each excludes the budgets the previous one found full).
MAX_ROUNDS = 8
# Turns between keys: how many keys one claim looks at, and how many due jobs of each.
KEYS_PER_CLAIM = 200
HEADS_PER_KEY = 4
DUE_COLUMNS = "id, queue_name, task_path, limit_key, priority, run_after"
# PostgreSQL: a claim's starts (job id, budget id, slack, one row per budget?) as rows of
# jobs_limitstart; {claimed}: only those of jobs the claim's own statement did claim.
RECORD_STARTS = f"""
    INSERT INTO {STARTS} (job_id, bucket, started_at, starts)
    SELECT CASE WHEN s.bulk THEN NULL ELSE s.id END, s.bucket,
           now() + max(s.slack) * interval '1 second', count(*)
    FROM unnest(%s::uuid[], %s::text[], %s::float8[], %s::bool[]) AS s(id, bucket, slack, bulk)
    {{claimed}} GROUP BY s.bucket, CASE WHEN s.bulk THEN NULL ELSE s.id END
"""
RECORDED_IF_CLAIMED = (
    "recorded AS (" + RECORD_STARTS.format(claimed="WHERE s.id IN (SELECT id FROM claimed)") + ")"
)


def lock_key(bucket_id: str) -> int:
    """A budget's advisory lock key (int4); a collision only makes a claim skip it once."""
    return zlib.crc32(bucket_id.encode()) - 2**31


class Room:
    """What the budgets this claim holds still allow."""

    def __init__(self):
        self.left: dict[str, float] = {}
        self.full: set = set()
        # Budgets with room whose jobs this claim passes over: each must begin at once, and no
        # executor is free to begin it (LimitedClaim.can_begin).
        self.passed: set = set()
        # Starts counted in each rate budget's window, this claim's included.
        self.started: dict[str, int] = {}
        # Running jobs counted in each concurrency budget, this claim's included.
        self.running: dict[str, int] = {}

    def fits(self, buckets) -> bool:
        return all(self.left.get(b.id, 0) >= 1 for b in buckets)

    def roomy(self, rated) -> bool:
        """Are these rate budgets far enough from their limits to give one more job a long
        slack (jobs.limits.RATE_ROOMY_SHARE)?"""
        return all(self.started[b.id] + 1 <= b.spec.rate[0] * RATE_ROOMY_SHARE for b in rated)

    def far(self, rated, *, coming=1) -> bool:
        """So far from their limits, with `coming` more starts, that a job's starts may go in
        one row per budget with the claim's other such jobs (jobs.limits.RATE_BULK_SHARE)?"""
        return all(self.started[b.id] + coming <= b.spec.rate[0] * RATE_BULK_SHARE for b in rated)

    def take(self, buckets) -> None:
        for b in buckets:
            self.left[b.id] -= 1
            if self.left[b.id] < 1:
                self.full.add(b)
            if b.id in self.started:
                self.started[b.id] += 1
            if b.id in self.running:
                self.running[b.id] += 1

    def half_full(self, b) -> bool:
        """Is budget `b` (counted) past half its limit, this claim's jobs included?"""
        spec, share = b.spec, RATE_ROOMY_SHARE
        running = self.running.get(b.id, 0)
        if spec.concurrency is not None and running > spec.concurrency * share:
            return True
        return spec.rate is not None and self.started.get(b.id, 0) > spec.rate[0] * share


class LimitedClaim:
    def __init__(self, engine, cursor, limits, queues):
        self.engine = engine
        self.cursor: Any = cursor
        self.limits = limits
        self.queues = queues
        self.room = Room()
        self.held: dict[str, Any] = {}  # the budgets this claim has counted, by id
        # The oldest start counted in each rate budget's window (its latest moment).
        self.oldest_start: dict = {}
        # Jobs with a short rate slack this claim may still take (they must begin at once).
        self.can_begin = 0
        # Jobs whose starts go in one row per budget (Room.far).
        self.bulk: set = set()

    # --- SQL pieces ------------------------------------------------------------------------

    def due_tests(self, taken: list) -> tuple[str, list]:
        """The tests of a due read beyond the claim index's own: the queues, and neither a full
        budget, nor one passed over, nor a job this claim took already."""
        tests, params = [], []
        if len(self.queues) == 1:
            tests.append("AND queue_name = %s")
            params.append(self.queues[0])
        elif self.queues:
            tests.append(f"AND {self.engine.in_list('queue_name')}")
            params.append(self.engine.list_value(self.queues))
        full: dict[str, list] = {"queue": [], "task": [], "key": []}
        for b in self.room.full | self.room.passed:
            full[b.spec.kind].append(b.value)
        for kind, column in (("queue", "queue_name"), ("task", "task_path")):
            if full[kind]:
                tests.append(f"AND NOT {self.engine.in_list(column)}")
                params.append(self.engine.list_value(sorted(full[kind])))
        if full["key"]:
            tests.append(f"AND (limit_key IS NULL OR NOT {self.engine.in_list('limit_key')})")
            params.append(self.engine.list_value(sorted(full["key"])))
        if taken:
            tests.append(f"AND NOT {self.engine.in_list('id')}")
            # Ids as the database returned them: already in its own form.
            params.append(self.engine.list_value(taken))
        return " ".join(tests), params

    def candidates(self, want: int, taken: list) -> list:
        """Due jobs in claim order outside full budgets: DUE_COLUMNS."""
        tests, params = self.due_tests(taken)
        shape = min(len(self.queues), 2)
        self.cursor.execute(self.engine.due_jobs(DUE_COLUMNS, tests, shape), [*params, want])
        return self.cursor.fetchall()

    def key_heads(self, taken: list) -> list:
        """The first due jobs of each limit key (DUE_COLUMNS), keys in key order."""
        tests, params = self.due_tests(taken)
        claimable = f"state IN ({sql_in(CLAIMABLE)}) AND limit_key IS NOT NULL"
        due = f"""
            SELECT {DUE_COLUMNS} FROM {self.engine.key_source()}
            WHERE {claimable} AND limit_key = %s AND run_after <= {self.engine.now}
              AND attempt < max_attempts AND (not_after IS NULL OR not_after > {self.engine.now})
              {tests} AND queue_name NOT IN (SELECT name FROM {PAUSED})
            ORDER BY priority DESC, run_after LIMIT %s
        """
        following = f"""
            SELECT limit_key FROM {self.engine.key_source()}
            WHERE {claimable} AND limit_key > %s ORDER BY limit_key LIMIT 1
        """
        # One statement: a recursive loose scan over the keys, each key's jobs beside it,
        # from the key after the last one the previous turn read when it read as many as it
        # may (so that keys past the first KEYS_PER_CLAIM get their turns too).
        keys = f"""
            WITH RECURSIVE keys(k) AS (
                SELECT ({following})
                UNION ALL
                SELECT ({following.replace("%s", "keys.k")}) FROM keys WHERE k IS NOT NULL
                {"" if self.engine.locks_rows else f"LIMIT {KEYS_PER_CLAIM + 1}"}
            )
        """
        if self.engine.locks_rows:
            sql = f"""{keys}
                SELECT h.* FROM (SELECT k FROM keys WHERE k IS NOT NULL LIMIT {KEYS_PER_CLAIM}) ks
                CROSS JOIN LATERAL ({due.replace("limit_key = %s", "limit_key = ks.k")}) AS h
            """
        else:  # no LATERAL: each key's jobs by a correlated IN
            picked = due.replace("limit_key = %s", "limit_key = keys.k").replace(
                f"SELECT {DUE_COLUMNS}", "SELECT id", 1
            )
            columns = ", ".join(f"j.{c.strip()}" for c in DUE_COLUMNS.split(","))
            sql = f"{keys} SELECT {columns} FROM keys JOIN {JOB} j ON j.id IN ({picked})"
        self.cursor.execute(sql, [self.limits.keys_from, *params, HEADS_PER_KEY])
        heads = self.cursor.fetchall()
        read = {row[3] for row in heads}
        self.limits.keys_from = max(read) if len(read) >= KEYS_PER_CLAIM else ""
        return heads

    def running_count(self, buckets) -> tuple[str, list] | None:
        """The statement counting running jobs by (queue, task, key) for budgets with a
        concurrency limit; rows ('running', queue, task, key, n, NULL)."""
        by: dict[str, set] = {"queue": set(), "task": set(), "key": set()}
        for b in buckets:
            if b.spec.concurrency is not None:
                by[b.spec.kind].add(b.value)
        tests, params = [], []
        for kind, column in (("queue", "queue_name"), ("task", "task_path"), ("key", "limit_key")):
            if by[kind]:
                tests.append(self.engine.in_list(column))
                params.append(self.engine.list_value(sorted(by[kind])))
        if not tests:
            return None
        sql = (
            f"SELECT 'running', queue_name, task_path, limit_key, count(*), NULL FROM {JOB} "
            f"WHERE state = {sql_state(JobState.RUNNING)} AND ({' OR '.join(tests)}) "
            f"GROUP BY queue_name, task_path, limit_key"
        )
        return sql, params

    def starts_counts(self, buckets) -> list[tuple[str, list]]:
        """The statements counting starts within each rate window (latest moment within it),
        one per window length; rows ('started', bucket, NULL, NULL, n, the oldest moment)."""
        by_window = defaultdict(list)
        for b in buckets:
            if b.spec.rate is not None:
                by_window[b.spec.rate[1]].append(b.id)
        return [
            (
                f"SELECT 'started', bucket, NULL, NULL, sum(starts), min(started_at) FROM {STARTS} "
                f"WHERE {self.engine.in_list('bucket')} "
                f"AND started_at > {self.engine.after('%s')} GROUP BY bucket",
                [self.engine.list_value(sorted(ids)), -seconds],
            )
            for seconds, ids in by_window.items()
        ]

    def counts(self, buckets, *, running=True, started=True) -> tuple[dict, dict]:
        """Running jobs per budget with a concurrency limit, and starts counted in the window
        per budget with a rate limit: one statement."""
        counted_running = {b.id: 0 for b in buckets if running and b.spec.concurrency is not None}
        counted_starts = {b.id: 0 for b in buckets if started and b.spec.rate is not None}
        asked = [self.running_count(buckets)] if running else []
        asked += self.starts_counts(buckets) if started else []
        parts = [p for p in asked if p is not None]
        if not parts:
            return counted_running, counted_starts
        self.cursor.execute(
            " UNION ALL ".join(sql for sql, _ in parts), [v for _, ps in parts for v in ps]
        )
        for what, first, task, key, n, oldest in self.cursor.fetchall():
            if what == "started":
                counted_starts[first] = n
                self.oldest_start[first] = oldest
                continue
            for b in self.limits.buckets(first, task, key):
                if b.id in counted_running:
                    counted_running[b.id] += n
        return counted_running, counted_starts

    def count_running(self, buckets) -> dict[str, int]:
        """Running jobs per budget, for budgets with a concurrency limit."""
        return self.counts(buckets, started=False)[0]

    def count_starts(self, buckets) -> dict[str, int]:
        """Starts counted in each rate window, for budgets with a rate limit."""
        return self.counts(buckets, running=False)[1]

    # --- the rounds ------------------------------------------------------------------------

    def open(self, buckets: dict, *, wait=False) -> None:
        """Hold and count the budgets (by id) not held yet; those another claim holds count
        as full."""
        new = {i: b for i, b in buckets.items() if i not in self.held}
        if not new:
            return
        got = self.engine.lock_budgets(self.cursor, sorted(new), wait=wait)
        for bucket_id, b in new.items():
            if bucket_id not in got:
                self.room.left[bucket_id] = 0
                self.room.full.add(b)
        counted = [b for i, b in new.items() if i in got]
        running, starts = self.counts(counted)
        for b in counted:
            left = float("inf")
            if b.spec.concurrency is not None:
                left = min(left, b.spec.concurrency - running[b.id])
            if b.spec.rate is not None:
                left = min(left, b.spec.rate[0] - starts[b.id])
                self.room.started[b.id] = starts[b.id]
                if starts[b.id] >= b.spec.rate[0]:
                    self.limits.rate_room_after(self.oldest_start[b.id], b.spec.rate[1])
            if b.spec.concurrency is not None:
                self.room.running[b.id] = running[b.id]
            self.room.left[b.id] = left
            if left < 1:
                self.room.full.add(b)
        self.held.update(new)

    def pick(self, limit: int) -> tuple[list, dict, dict]:
        """The ids to claim, in claim order, the budgets each draws on, and the slack of each
        under a rate limit."""
        taken: list = []
        drawn: dict = {}
        slacks: dict = {}
        for round in range(MAX_ROUNDS):
            want = limit - len(taken)
            asked = want + want // 4 + 10
            # Budgets left out of this read: one found full or passed over from here on makes
            # the next read return other jobs.
            left_out = len(self.room.full) + len(self.room.passed)
            rows = self.candidates(asked, taken)
            read_all = len(rows) < asked
            if self.limits.takes_turns:
                heads = self.key_heads(taken) if round == 0 and self.limits.turns_due() else []
                rows = in_turns(rows, heads, self.limits.served)
            budgets = {row[0]: self.limits.buckets(row[1], row[2], row[3]) for row in rows}
            self.open({b.id: b for bs in budgets.values() for b in bs}, wait=round == 0)
            rated_of: dict[tuple, list] = {}
            for row in rows:
                bs = budgets[row[0]]
                if not self.room.fits(bs):
                    continue
                rated = rated_of.get(bs)
                if rated is None:
                    rated = rated_of[bs] = [b for b in bs if b.spec.rate is not None]
                if rated:
                    roomy = self.room.roomy(rated)
                    slack = min(rate_slack(b.spec.rate[1], roomy=roomy) for b in rated)
                    at_once = slack < RATE_SLACK_TO_WAIT
                    if at_once and self.can_begin < 1:
                        # Left for a claim with an executor free to begin it; the next read
                        # leaves its budgets out, so the jobs behind them are not held up.
                        self.room.passed.update(rated)
                        continue
                    self.can_begin -= at_once
                    slacks[row[0]] = float(slack)
                    if roomy and self.room.far(rated):
                        self.bulk.add(row[0])
                self.room.take(bs)
                taken.append(row[0])
                drawn[row[0]] = bs
                if len(taken) >= limit:
                    return taken, drawn, slacks
            if read_all or len(self.room.full) + len(self.room.passed) == left_out:
                break  # nothing more is due, or the next read would return the same jobs
        return taken, drawn, slacks

    def keeps(self, batch, drawn) -> bool:
        """After claiming first (claim_then_count): is every budget still at most half full,
        and may each job wait behind others? If so, record the starts and say yes."""
        slacks: dict = {}
        rated_of: dict = {}  # each job's rate budgets
        for c in batch:
            rated = rated_of[c.id] = [b for b in drawn[c.id] if b.spec.rate is not None]
            for b in rated:
                self.room.started[b.id] += 1
            if rated:
                slack = min(rate_slack(b.spec.rate[1], roomy=True) for b in rated)
                if slack < RATE_SLACK_TO_WAIT:
                    return False  # must begin at once: the careful claim knows who can
                slacks[c.id] = slack
        if self.room.full or any(self.room.half_full(b) for b in self.held.values()):
            return False
        # Every start of the batch is counted already: none more to come.
        self.bulk = {job_id for job_id in slacks if self.room.far(rated_of[job_id], coming=0)}
        starts = self.starts_of(list(slacks), drawn, slacks)
        self.record_starts([(self.engine.uuid_value(job_id), *s) for job_id, *s in starts])
        self.engine.recorded_starts |= bool(starts)
        for c in batch:
            c.rate_slack = float(slacks.get(c.id, 0.0))
        return True

    def starts_of(self, claimed_ids, drawn, slacks) -> list[tuple]:
        """(job id, budget id, slack, in one row per budget?) of each start the claimed jobs
        make in a rate budget."""
        return [
            (job_id, b.id, slacks[job_id], job_id in self.bulk)
            for job_id in claimed_ids
            for b in drawn.get(job_id, ())
            if b.spec.rate is not None
        ]

    def record_starts(self, starts) -> None:
        """Record starts (starts_of) at their latest moment, claim time + slack: a row per job
        and budget, or one per budget for the bulk ones (as RECORDED_IF_CLAIMED). One
        statement (the starts as one JSON parameter on SQLite)."""
        if not starts:
            return
        if self.engine.locks_rows:
            columns = [list(column) for column in zip(*starts, strict=True)]
            self.cursor.execute(RECORD_STARTS.format(claimed=""), columns)
            return
        field = "json_extract(s.value, '$[{}]')".format
        job = f"CASE WHEN {field(3)} THEN NULL ELSE {field(0)} END"
        self.cursor.execute(
            f"INSERT INTO {STARTS} (job_id, bucket, started_at, starts) "
            f"SELECT {job}, {field(1)}, {self.engine.after(f'max({field(2)})')}, count(*) "
            f"FROM json_each(%s) AS s GROUP BY {field(1)}, {job}",
            [json.dumps(starts)],
        )


def in_turns(rows: list, heads: list, served: dict | None = None) -> list:
    """Both reads' jobs once each, in claim order with one job per limit key in turn among
    jobs of equal priority (jobs without a key keep their place).

    Each round of turns goes to the keys in the order this worker last served them (`served`:
    key -> the number of the claim that last took one of its jobs; never served first), each
    key's job taking the place in claim order of the round's oldest job not yet placed: so a
    claim that takes one job gives it to another key than the last one did, and a key's
    backlog never keeps a newer key waiting from claim to claim.
    """
    served = served or {}
    by_id = {row[0]: row for row in rows}
    for row in heads:
        by_id.setdefault(row[0], row)
    ordered = sorted(by_id.values(), key=lambda r: (-r[4], r[5]))
    seen: dict = defaultdict(int)
    rounds: dict = defaultdict(list)  # (priority, turn) -> its keyed rows' indexes
    turns = []
    for index, row in enumerate(ordered):
        key = row[3]
        turn = seen[key] if key is not None else 0
        turns.append([-row[4], turn, row[5], 0])
        if key is not None:
            seen[key] += 1
            rounds[row[4], turn].append(index)
    for indexes in rounds.values():
        places = sorted(ordered[i][5] for i in indexes)
        by_key = sorted(indexes, key=lambda i: (served.get(ordered[i][3], -1), ordered[i][5]))
        # Jobs enqueued in one transaction share their due time (PostgreSQL's now()): the
        # rank in the round breaks the tie, or the last key served would still come last.
        for rank, (index, place) in enumerate(zip(by_key, places, strict=True)):
            turns[index][2:] = [place, rank]
    order = sorted(range(len(ordered)), key=lambda i: turns[i])
    return [ordered[i] for i in order]


def claimed_by_id(engine) -> str:
    """The test of a claim by id (one list_value parameter)."""
    if engine.locks_rows:
        # Rows another claim has locked are left to it (the turns' reads lock nothing).
        return (
            f"id IN (SELECT id FROM {JOB} WHERE {engine.in_list('id')} "
            f"AND state IN ({sql_in(CLAIMABLE)}){engine.skip_locked(True)})"
        )
    # `+state` keeps SQLite's planner on the primary key (as sqlite.claim_ids_sql).
    return f"{engine.in_list('id')} AND +state IN ({sql_in(CLAIMABLE)})"


def claim_limited(engine, *, worker_id, queues, limit, lease_seconds, limits, can_begin=None):
    """Claim up to `limit` due jobs whose budgets all have room, in claim order."""
    limits.rate_room_at = float("inf")
    if (
        limits.claims_roomy
        and not limits.turns_pending()
        and time.monotonic() >= limits.count_first_until
    ):
        batch = claim_then_count(
            engine,
            worker_id=worker_id,
            queues=queues,
            limit=limit,
            lease_seconds=lease_seconds,
            limits=limits,
        )
        if batch is not None:
            limits.took_keys({c.limit_key for c in batch})
            return batch
    limits.claims_roomy = False
    lease_id = uuid.uuid4()
    queues = list(dict.fromkeys(queues)) if queues else []
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        engine.local_settings(cursor)
        claim = LimitedClaim(engine, cursor, limits, queues)
        claim.can_begin = limit if can_begin is None else can_begin
        ids, drawn, slacks = claim.pick(limit)
        if not ids:
            return []
        update = (
            f"UPDATE {JOB} SET {engine.claim_sets()} WHERE {claimed_by_id(engine)} "
            f"RETURNING {engine.claimed_columns()}"
        )
        params = [engine.uuid_value(lease_id), lease_seconds, worker_id, engine.list_value(ids)]
        starts = claim.starts_of(ids, drawn, slacks)
        engine.recorded_starts |= bool(starts)
        # Left with every budget at most half full, the next claim may count after it claims.
        limits.claims_roomy = not claim.room.full and not any(
            claim.room.half_full(b) for b in claim.held.values()
        )
        if starts and connection.vendor == "postgresql":
            # One statement: the claim, and the starts of the jobs it did claim.
            columns = [list(column) for column in zip(*starts, strict=True)]
            cursor.execute(
                f"WITH claimed AS ({update}), {RECORDED_IF_CLAIMED} SELECT * FROM claimed",
                [*params, *columns],
            )
            rows = cursor.fetchall()
        else:
            cursor.execute(update, params)
            rows = cursor.fetchall()
            # Ids come back as the candidate reads returned them (the database's own form).
            claimed = {r[0] for r in rows}
            claim.record_starts([s for s in starts if s[0] in claimed])
    batch = engine.claimed_batch(rows, lease_id)
    if slacks:
        slack = {parse_uuid(job_id): s for job_id, s in slacks.items()}
        for c in batch:
            c.rate_slack = slack.get(c.id, 0.0)
    limits.took_keys({c.limit_key for c in batch})
    return batch


def claim_then_count(engine, *, limits, **claim_args) -> list | None:
    """While the last claim left every budget it drew on at most half full: claim as if under
    no limit (one statement), then hold and count the budgets the claimed jobs draw on, their
    jobs included. If each is still at most half full, keep the claim and record its starts;
    else undo it and return None (the careful claim decides, and claims count first until one
    finds room again). As exact as counting first: the count is made holding the budgets'
    locks, in key order, so it sees every claim that held them before. Turns between keys are
    left to the careful claim (it runs whenever they are due)."""
    # Inside a finish's transaction, a savepoint to undo to; else a transaction of its own.
    with transaction.atomic(savepoint=connection.in_atomic_block):
        batch = engine.claim(**claim_args)
        if not batch:
            return batch
        # The claim set the worker's transaction-local settings already.
        with connection.cursor() as cursor:
            check = LimitedClaim(engine, cursor, limits, [])
            drawn = {c.id: limits.buckets(c.queue_name, c.task_path, c.limit_key) for c in batch}
            check.open({b.id: b for bs in drawn.values() for b in bs}, wait=True)
            if check.keeps(batch, drawn):
                return batch
        transaction.set_rollback(True)  # back to the savepoint: nothing was claimed
    limits.claims_roomy = False
    limits.count_first_until = time.monotonic() + COUNT_FIRST_AFTER_UNDO
    return None
