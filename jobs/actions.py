"""Retry, rerun, cancel, run now and discard: the one implementation every front end calls.

Each is a guarded update, so two concurrent calls have one effect. `retry`, `cancel`, `run_now`
and `discard` return whether they changed the job; `rerun` returns the new Job or None. Pass
`user` and `source` to have an audit entry written (the console and the API always do); a bulk
action (`jobs.bulk`) passes `record=False` and writes one entry for the whole batch instead.
"""

import uuid
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Least
from django.utils import timezone

from . import db, moments, payload, workflows
from .backend import limit_key_for
from .errors import CANCELLED_BY_OPERATOR, JobCancelled
from .models import AuditEntry, Dependency, Job
from .reconnect import again_after_deadlock
from .retry import MAX_ATTEMPTS
from .states import (
    CLAIMABLE,
    DISCARDABLE,
    RERUNNABLE,
    RETRYABLE,
    TERMINAL,
    WAITING,
    JobState,
)
from .tasks import load_task

# The sources of each action, from the transition table (jobs.states).
CANCELLABLE = WAITING
# Waiting for a run_after in the future; "run now" brings that moment forward.
RUNNABLE_NOW = CLAIMABLE


def due_later(job, now=None):
    """When `job` waits for a run_after still ahead (the moment "run now" brings forward)."""
    now = now or timezone.now()
    if job.state in RUNNABLE_NOW and job.run_after > now:
        return job.run_after
    return None


@dataclass(frozen=True, slots=True)
class ActionResult:
    """What an action did, in words an operator can read."""

    changed: bool
    message: str
    job: Job | None = None
    new_job: Job | None = None
    # The job that holds this job's dedup_key, when that is what stopped a retry.
    held_by: uuid.UUID | None = None


def _job_id(job_or_id):
    value = getattr(job_or_id, "id", job_or_id)
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        return None


def _audit(job_id, action, outcome, *, record=True, **audit):
    """`audit`: who acted and from where (user=, source=), as AuditEntry.record takes them."""
    if record:
        AuditEntry.record(job_id=job_id, action=action, outcome=outcome, **audit)


def _state_of(job_id):
    return Job.objects.filter(id=job_id).values_list("state", flat=True).first()


def _answer(job_id, action, changed, *, done, refused_in, refusal, audit) -> ActionResult:
    """Word, audit and answer a guarded update of one job: `done` when it changed the row,
    `refusal` when the job is in one of `refused_in` states, its state otherwise."""
    state = _state_of(job_id)
    if state is None:
        return ActionResult(False, "no such job")
    if changed:
        message = done
    elif state in refused_in:
        message = refusal
    else:
        message = f"job already {_words(state)}"
    _audit(job_id, action, message, **audit)
    if changed:
        db.notify_workers()
    return ActionResult(bool(changed), message, job=Job.objects.get(id=job_id))


@again_after_deadlock
def retry_job(job_or_id, *, user=None, source="python", record=True) -> ActionResult:
    job_id = _job_id(job_or_id)
    if job_id is None:
        return ActionResult(False, "no such job")
    with transaction.atomic():
        refused = _refused_for_upstream(job_id, user=user, source=source, record=record)
        if refused is not None:
            return refused
        try:
            changed = bool(_put_back_in_line([job_id]))
        except IntegrityError:
            # Another job took the dedup_key while this one was terminal; the partial unique
            # index decided, so two concurrent retries or enqueues never both win.
            refused = _refused_for_dedup_key(job_id, user=user, source=source, record=record)
            if refused is None:
                raise
            return refused
        rearmed = workflows.rearm([job_id]) if changed else []
        return _answer(
            job_id,
            "retry",
            changed,
            done="job put back in line"
            + (f"; {len(rearmed)} jobs after it wait again" if rearmed else ""),
            refused_in=RETRYABLE,
            refusal=f"job used all {MAX_ATTEMPTS} attempts; rerun it instead",
            audit={"user": user, "source": source, "record": record},
        )


def retry_many(job_ids) -> int:
    """Retry each of `job_ids` as `retry_job` does; the number put back in line. Nothing is
    audited per job (a bulk action writes its own entry)."""
    return len(put_back_many(job_ids))


@again_after_deadlock
def put_back_many(job_ids) -> list[uuid.UUID]:
    """Retry each of `job_ids` as `retry_job` does, in one transaction; the ids put back in
    line. Nothing is audited.

    The jobs that come after none of the others (every job outside workflows, a batch's
    jobs, the failed nodes of most workflows) go back in one statement, and the graph after
    them is re-armed once for them all. The nodes that come after another of them follow layer
    by layer, each layer (those no other waiting one comes before) in one statement that
    re-arms the graph as it is then (a node and a run-anyway node after it, put back
    together, would count the first twice). A job that runs only after an upstream job that
    did not succeed, and is not put back with it, is left as it is, as a single press refuses
    it. When a dedup_key was taken meanwhile, each job is retried or refused on its own, as a
    single press is. The workers are woken once.
    """
    ids = sorted(set(job_ids))
    # Read once: a retry changes no edge, and a chain put back layer by layer asks every layer.
    below = workflows.edges_below(ids)
    later = workflows.after_others(ids, below)
    try:
        with transaction.atomic():
            first = [job_id for job_id in ids if job_id not in later]
            blocked = workflows.failed_upstream(first)
            # A cancelled node that the retry of a job before it re-arms is put back by it.
            retryable = set(
                Job.objects.filter(id__in=later, state__in=RETRYABLE).values_list("id", flat=True)
            )
            back = _put_back_in_line([job_id for job_id in first if job_id not in blocked])
            back += [j for j in workflows.rearm(back) if j in retryable]
            done = set(back)
            # Layer by layer: those no other waiting one comes before go back together (a
            # fan-out of cancelled nodes is one statement, not one per node). A node that runs
            # only after a failed one among them waits for that one's layer; one whose failed
            # upstream job is not among them stays as it is.
            waiting = [job_id for job_id in sorted(later) if job_id not in done]
            blocked = workflows.failed_upstream(waiting)
            while waiting:
                ready = [job_id for job_id in waiting if job_id not in blocked]
                if not ready:
                    break
                deeper = workflows.after_others(ready, below)
                layer = {job_id for job_id in ready if job_id not in deeper}
                these = _put_back_in_line(sorted(layer))
                rearmed = workflows.rearm(these)
                these += [j for j in rearmed if j in retryable and j not in done]
                back += these
                done.update(these, layer)
                waiting = [job_id for job_id in waiting if job_id not in done]
                # Only the jobs right after one whose state changed may be unblocked: asked
                # again, not every waiting one (a long chain would ask each layer for all).
                changed = layer.union(these, rearmed)
                asked = {j for c in changed for j in below.get(c, ())}.intersection(waiting)
                for job_id in asked:
                    blocked.pop(job_id, None)
                blocked.update(workflows.failed_upstream(sorted(asked)))
    except IntegrityError:
        return [job_id for job_id in ids if retry_job(job_id, record=False).changed]
    if back:
        db.notify_workers()
    return back


def _put_back_in_line(job_ids) -> list[uuid.UUID]:
    """Put the finished jobs of `job_ids` back in line; the ids of those it changed. A job that
    used the largest allowed number of attempts can only rerun."""
    # A savepoint: a dedup_key conflict rolls back this update only (PostgreSQL would otherwise
    # refuse every later statement of the transaction).
    with transaction.atomic():
        back = _held_in(job_ids, RETRYABLE, attempt__lt=MAX_ATTEMPTS)
        Job.objects.filter(id__in=back).update(
            state=JobState.PENDING,
            run_after=timezone.now(),
            finished_at=None,
            started_at=None,
            error_type="",
            error_message="",
            error_traceback="",
            dead_letter_reason="",
            worker_id="",
            lease_id=None,
            lease_expires_at=None,
            cancel_requested_at=None,
            # A job that snoozed too often may snooze again as often as a new one.
            snoozes_forgiven=F("snoozes"),
            # Exhausted jobs get one more attempt; the history of attempts is kept as it is.
            max_attempts=Least(
                MAX_ATTEMPTS,
                F("max_attempts") + (F("attempt") + 1 - F("max_attempts")) * _exhausted(),
            ),
        )
        return back


def _refused_for_upstream(job_id, *, user, source, record) -> ActionResult | None:
    """A retry refused because the job runs only after an upstream job that did not succeed:
    put back, it would be cancelled again for that failure (CONTRACT section 13)."""
    found = workflows.failed_upstream([job_id]).get(job_id)
    if found is None or _state_of(job_id) not in RETRYABLE:
        return None
    upstream, state = found
    message = (
        f"job runs only after job {upstream}, which is {_ended(state)}: retry that job first (the "
        "jobs its failure cancelled wait again with it)"
    )
    _audit(job_id, "retry", message, user=user, source=source, record=record)
    return ActionResult(False, message, job=Job.objects.get(id=job_id))


def _refused_for_dedup_key(job_id, *, user, source, record) -> ActionResult | None:
    job = Job.objects.get(id=job_id)
    if not job.dedup_key:
        return None
    holder = Job.objects.holding_dedup_key(job.dedup_key).values_list("id", flat=True).first()
    if holder is None:
        # The holder finished in the meantime; the key is free again, but this press lost.
        message = f"dedup_key {job.dedup_key!r} was taken by another job; try again"
    else:
        message = f"dedup_key {job.dedup_key!r} is held by job {holder}; retry it once that ends"
    _audit(job_id, "retry", message, user=user, source=source, record=record)
    return ActionResult(False, message, job=job, held_by=holder)


def _exhausted():
    from django.db.models import Case, IntegerField, Value, When

    return Case(
        When(attempt__gte=F("max_attempts"), then=Value(1)),
        default=Value(0),
        output_field=IntegerField(),
    )


def rerun_job(
    job_or_id, *, args=None, kwargs=None, user=None, source="python", request_key=""
) -> ActionResult:
    """Enqueue a new run. A repeated `request_key` (one press of a button) has one effect.

    `args` and `kwargs`, when given, replace the original's (an edited rerun); they are checked
    like an enqueue's and a bad value raises TypeError/ValueError before anything is written.
    """
    edited = args is not None or kwargs is not None
    if args is not None:
        if not isinstance(args, list | tuple):
            raise TypeError("args must be a list")
        args = payload.check_json(list(args), "args")
    if kwargs is not None:
        if not isinstance(kwargs, dict):
            raise TypeError("kwargs must be an object (a dict)")
        kwargs = payload.check_json(dict(kwargs), "kwargs")
    job_id = _job_id(job_or_id)
    original = Job.objects.filter(id=job_id).first() if job_id else None
    if original is None:
        return ActionResult(False, "no such job")
    if request_key:
        earlier = _earlier_rerun(request_key)
        if earlier is not None:
            return earlier
    limit_key = original.limit_key
    if edited:
        args, kwargs = payload.check_arguments(
            original.args if args is None else args, original.kwargs if kwargs is None else kwargs
        )
        limit_key = _limit_key_of_edited_rerun(original, args, kwargs)
    if original.state not in RERUNNABLE:
        return _not_rerunnable(original, user, source)
    new_id = uuid.uuid4()
    try:
        with transaction.atomic():
            # The original is neither discarded nor put back in line before the run pointing
            # at it is stored.
            upstream = list(
                Dependency.objects.filter(downstream_id=original.id).values_list(
                    "upstream_id", flat=True
                )
            )
            # The upstream jobs too: none is put back in line before the run after it is stored.
            held = _held_in([original.id, *upstream], RERUNNABLE)
            if original.id not in held:
                now = Job.objects.filter(id=original.id).first()
                if now is None:
                    return ActionResult(False, "no such job")
                return _not_rerunnable(now, user, source)
            refused = _rerun_refused_for_upstream(original, upstream, user, source)
            if refused is not None:
                return refused
            db.insert_job(
                {
                    "id": new_id,
                    "task_path": original.task_path,
                    "backend": original.backend,
                    "args": original.args if args is None else args,
                    "kwargs": original.kwargs if kwargs is None else kwargs,
                    "queue_name": original.queue_name,
                    "priority": original.priority,
                    "state": JobState.PENDING,
                    "attempt": 0,
                    "max_attempts": _own_max_attempts(original),
                    "timeout": original.timeout,
                    "backoff": original.backoff,
                    "limit_key": limit_key,
                    "rerun_of_id": original.id,
                    "node_name": original.node_name if upstream else "",
                    "runs_on_upstream_failure": original.runs_on_upstream_failure,
                }
            )
            # A node's new run reads its upstream jobs' values as the node did, and is re-armed,
            # or cancelled, with them should they be retried (outside the workflow's counts).
            Dependency.objects.bulk_create(
                [Dependency(downstream_id=new_id, upstream_id=u) for u in upstream]
            )
            AuditEntry.record(
                job_id=original.id,
                user=user,
                action="rerun",
                source=source,
                outcome="new run enqueued",
                result_job_id=new_id,
                request_key=request_key,
                detail=_edit_detail(original, args, kwargs) if edited else {},
            )
    except IntegrityError:
        # The same press arrived twice at once: the other one made the run.
        earlier = _earlier_rerun(request_key) if request_key else None
        if earlier is None:
            raise
        return earlier
    new_job = Job.objects.get(id=new_id)
    return ActionResult(True, "new run enqueued", job=original, new_job=new_job)


def _rerun_refused_for_upstream(original, upstream, user, source) -> ActionResult | None:
    """A new run of a node refused while one of its upstream jobs is not as the node needs it
    (succeeded; ended, for a node that runs on upstream failure): it would not have its input."""
    allowed = TERMINAL if original.runs_on_upstream_failure else {JobState.SUCCEEDED}
    blocking = (
        Job.objects.filter(id__in=upstream)
        .exclude(state__in=allowed)
        .order_by("id")
        .values_list("id", "state")
        .first()
    )
    if blocking is None:
        return None
    up, state = blocking
    if state in TERMINAL:
        next_step = "retry that job first"
    else:
        next_step = "rerun this one once that job ended"
    message = f"job runs only after job {up}, which is {_ended(state)}: {next_step}"
    _audit(original.id, "rerun", message, user=user, source=source)
    return ActionResult(False, message, job=original)


def _not_rerunnable(job, user, source) -> ActionResult:
    message = f"job is {_words(job.state)}; only finished jobs can be rerun"
    _audit(job.id, "rerun", message, user=user, source=source)
    return ActionResult(False, message, job=job)


def _limit_key_of_edited_rerun(original, args, kwargs) -> str | None:
    """The limit key of a rerun with new arguments: the key the task computes from them, when
    it computes its key; else the original's (given per call, or per task)."""
    try:
        task = load_task(original.task_path)
    except Exception:
        return original.limit_key
    if not callable(getattr(task, "limit_key", None)):
        return original.limit_key
    try:
        return limit_key_for(task, args, kwargs)
    except Exception as e:
        raise ValueError(f"the task's limit_key of the new arguments failed: {e!r}") from None


def _own_max_attempts(job) -> int:
    """The attempts a new run of `job` gets: its task's own maximum, as an enqueue sets it.

    Not the job's max_attempts, which a retry of an exhausted job raised by one. When the task
    or its backend no longer loads, the job's figure is the best one left.
    """
    from .compat import task_backends

    try:
        task = load_task(job.task_path)
        backend = task_backends[job.backend]
    except (ImportError, TypeError, LookupError, ImproperlyConfigured):
        return job.own_max_attempts
    max_attempts_for = getattr(backend, "max_attempts_for", None)
    return max_attempts_for(task) if max_attempts_for else job.max_attempts


def _edit_detail(original, args, kwargs):
    return {
        "old": {"args": original.args, "kwargs": original.kwargs},
        "new": {
            "args": original.args if args is None else args,
            "kwargs": original.kwargs if kwargs is None else kwargs,
        },
    }


def _earlier_rerun(request_key):
    entry = AuditEntry.objects.filter(request_key=request_key).first()
    if entry is None:
        return None
    new_job = Job.objects.filter(id=entry.result_job_id).first()
    return ActionResult(False, "already rerun", job=entry.job, new_job=new_job)


@again_after_deadlock
def cancel_job(job_or_id, *, user=None, source="python", record=True) -> ActionResult:
    job_id = _job_id(job_or_id)
    if job_id is None:
        return ActionResult(False, "no such job")
    with transaction.atomic():
        moments.repair_stored([job_id])  # the answer reads the job back
        cancelled, asked = _cancel([job_id])
        if cancelled:
            message = "job cancelled"
        else:
            state = _state_of(job_id)
            if state is None:
                return ActionResult(False, "no such job")
            if asked:
                message = "cancel requested; the worker will stop the job"
            elif state == JobState.RUNNING:
                message = "cancel already requested"
            else:
                message = f"job already {_words(state)}"
        _audit(job_id, "cancel", message, user=user, source=source, record=record)
    return ActionResult(bool(cancelled or asked), message, job=Job.objects.get(id=job_id))


@again_after_deadlock
def cancel_many(job_ids) -> int:
    """Cancel each of `job_ids` as `cancel_job` does, in one transaction; the number cancelled
    or asked to stop. Nothing is audited per job (a bulk action writes its own entry)."""
    with transaction.atomic():
        cancelled, asked = _cancel(job_ids)
    return cancelled + asked


def _cancel(job_ids) -> tuple[int, int]:
    """Cancel the waiting jobs among `job_ids`, with the jobs waiting for them, and ask the
    running ones to stop (their worker ends them, cooperatively, then hard): how many of each.
    In the caller's transaction."""
    now = timezone.now()
    # Running jobs first: a finish holds its job's row, then locks the jobs it releases.
    running = _held_in(job_ids, [JobState.RUNNING])
    asked = Job.objects.filter(id__in=running, cancel_requested_at__isnull=True).update(
        cancel_requested_at=now
    )
    waiting = _held_in(job_ids, CANCELLABLE)
    if waiting:
        Job.objects.filter(id__in=waiting).update(
            state=JobState.CANCELLED,
            finished_at=now,
            error_type=JobCancelled.__name__,
            error_message=CANCELLED_BY_OPERATOR,
            cancel_requested_at=now,
        )
        db.cancel_continuations(waiting)
        db.add_counters({"jobs_cancelled": len(waiting)})
    # A job claimed while the locking read above waited for its row (PostgreSQL rereads it
    # as running once the claim commits) is neither of the two: it is asked to stop as well.
    rest = set(job_ids) - set(running) - set(waiting)
    if rest:
        claimed = _held_in(rest, [JobState.RUNNING])
        asked += Job.objects.filter(id__in=claimed, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        )
    return len(waiting), asked


def run_now_job(job_or_id, *, user=None, source="python") -> ActionResult:
    job_id = _job_id(job_or_id)
    if job_id is None:
        return ActionResult(False, "no such job")
    now = timezone.now()
    with transaction.atomic():
        changed = Job.objects.filter(id=job_id, state__in=RUNNABLE_NOW, run_after__gt=now).update(
            run_after=now
        )
        return _answer(
            job_id,
            "run now",
            changed,
            done="job due now",
            refused_in=RUNNABLE_NOW,
            refusal="job already due",
            audit={"user": user, "source": source},
        )


def discard_job(job_or_id, *, user=None, source="python", record=True) -> ActionResult:
    """Delete a finished job (not a running or waiting one) with its attempts.

    Jobs that point at it (reruns, continuations) keep their rows with the link cleared. A job
    that a workflow node or continuation after it still needs (it has not succeeded) is kept:
    discard that one first. The audit entry names the job by id and task, so it outlives it.
    """
    job_id = _job_id(job_or_id)
    if job_id is None:
        return ActionResult(False, "no such job")
    with transaction.atomic():
        moments.repair_stored([job_id])  # deleting reads the job and the rows pointing at it
        held = _held_in([job_id], DISCARDABLE)  # its state cannot change before the delete
        job = Job.objects.filter(id=job_id).only("id", "task_path", "state", "workflow_id").first()
        if job is None:
            return ActionResult(False, "no such job")
        if not held:
            message = f"job is {_words(job.state)}; only finished jobs can be discarded"
            _audit(job_id, "discard", message, user=user, source=source, record=record)
            return ActionResult(False, message, job=job)
        needing = workflows.first_needing(job)
        if needing is not None:
            message = (
                f"job {needing[0]} runs after this one and is {_words(needing[1])}: it needs "
                "this job's result; discard it first"
                + ("" if needing[1] == JobState.SUCCEEDED else ", or let it succeed")
            )
            _audit(job_id, "discard", message, user=user, source=source, record=record)
            return ActionResult(False, message, job=job)
        _delete(held)
        if record:
            AuditEntry.record(
                user=user,
                action="discard",
                source=source,
                outcome="job and its attempts deleted",
                subject=str(job_id),
                task_path=job.task_path,
            )
    return ActionResult(True, "job discarded", job=job)


def discard_many(job_ids) -> int:
    """Discard each of `job_ids` as `discard_job` does, in one transaction; the number deleted.
    A job that a job after it still needs goes once that one went (both among `job_ids`: a
    failed chain goes from its end), or stays. Nothing is audited per job (a bulk action
    writes its own entry)."""
    deleted = 0
    with transaction.atomic():
        moments.repair_stored(job_ids)
        held = set(_held_in(job_ids, DISCARDABLE))
        asked = sorted(held)
        while asked:
            free = list(
                Job.objects.filter(id__in=asked)
                .exclude(workflows.needed_after())
                .values_list("id", flat=True)
            )
            if not free:
                break
            # Only the jobs these were after may be free once these are gone: asked again,
            # not every held one (a long chain would ask each round for all).
            before = Dependency.objects.filter(downstream_id__in=free)
            upstream = set(before.values_list("upstream_id", flat=True))
            _delete(free)
            deleted += len(free)
            held.difference_update(free)
            asked = sorted(upstream & held)
    return deleted


def _delete(job_ids) -> None:
    # The jobs' ids are all the delete needs to read: attempts, log lines and edges go by
    # job id, and the links of the jobs pointing at them are cleared by one update each.
    Job.objects.filter(id__in=job_ids).only("id").delete()


def _held_in(job_ids, states, **also) -> list[uuid.UUID]:
    """Those of `job_ids` in one of `states` (and matching `also`, further field lookups), in
    id order, held there for the rest of the transaction: a locking read locks their rows in
    that order, rechecking each one's state (PostgreSQL); where rows are not locked (SQLite), a
    guarded no-op write takes the database's write lock first, whatever the transaction mode.

    Every action that changes many jobs at once locks them here first, so two of them over
    the same jobs never wait on each other crosswise.
    """
    jobs = Job.objects.filter(id__in=job_ids, state__in=states, **also)
    if db.engine().locks_rows:
        jobs = jobs.select_for_update()
    else:
        jobs.update(cancel_requested_at=F("cancel_requested_at"))
    return list(jobs.order_by("id").values_list("id", flat=True))


def _words(state):
    return JobState(state).label.lower()


def _ended(state):
    """A state in a sentence: "which is a dead letter", "which is cancelled"."""
    return "a dead letter" if state == JobState.DEAD_LETTER else _words(state)


# The contract's Python API.


def retry(job_id, **audit) -> bool:
    """Put a dead-lettered or cancelled job back in line, on the same row."""
    return retry_job(job_id, **audit).changed


def rerun(job_id, args=None, kwargs=None, **audit) -> Job | None:
    """Enqueue a new run of a finished job, linked to it through rerun_of.

    With `args`/`kwargs`, the new run takes those instead (checked like an enqueue: a bad
    value raises TypeError/ValueError and creates nothing).
    """
    return rerun_job(job_id, args=args, kwargs=kwargs, **audit).new_job


def cancel(job_id, **audit) -> bool:
    """Cancel a job that has not finished (a running job is stopped by its worker)."""
    return cancel_job(job_id, **audit).changed


def run_now(job_id, **audit) -> bool:
    """Make a pending or retrying job that waits for a later run_after due at once."""
    return run_now_job(job_id, **audit).changed


def discard(job_id, **audit) -> bool:
    """Delete a dead-lettered, cancelled or succeeded job and its attempts."""
    return discard_job(job_id, **audit).changed
