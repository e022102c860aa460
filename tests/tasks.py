"""Tasks the tests enqueue; the worker subprocess imports them from here."""

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from jobs.compat import task
from jobs.errors import Snooze, Unrecoverable
from jobs.retry import Exponential, Fixed, NoRetry

NO_WAIT = Fixed(0)


def _append(*fields):
    """Append a line to the file named by $JOBSITE_TEST_LEDGER (one line per execution)."""
    path = os.environ.get("JOBSITE_TEST_LEDGER")
    if path:
        with Path(path).open("a") as f:
            f.write(" ".join(str(field) for field in fields) + "\n")


def _ledger(name):
    _append(name, os.getpid(), time.time())


@task(backoff=NO_WAIT)
def add(a, b):
    return a + b


@task(backoff=NO_WAIT)
def record(key):
    _ledger(key)
    return key


@task(backoff=NO_WAIT, takes_context=True)
def flaky(context, key):
    _ledger(key)
    if context.attempt < 2:
        raise ConnectionError(f"attempt {context.attempt} of {key} failed")
    return {"key": key, "attempt": context.attempt}


@task(backoff=NO_WAIT, max_attempts=3, takes_context=True)
def always_fails(context, key):
    _ledger(key)
    raise ValueError(f"{key} failed on attempt {context.attempt}")


@task(backoff=NO_WAIT, max_attempts=5)
def gives_up(key):
    _ledger(key)
    raise Unrecoverable(f"{key} cannot succeed")


@task(backoff=NoRetry())
def fails_once_no_retry(key):
    raise RuntimeError(key)


@task(backoff=NoRetry())
def fails_with_unstorable_text():
    raise ValueError("NUL \x00 and a lone surrogate \udc80")


@task(backoff=NO_WAIT)
def sleepy(seconds, key=""):
    time.sleep(seconds)
    _ledger(key or f"sleepy-{seconds}")
    return seconds


@task(backoff=NO_WAIT, max_attempts=2, timeout=1)
def ignores_timeout(key):
    _ledger(key)
    while True:  # a CPU loop that never yields
        pass


@task(backoff=NO_WAIT, max_attempts=1, timeout=1)
def starts_processes_and_hangs(key):
    """Starts a child that starts a grandchild (their pids go to the ledger), then spins."""
    script = "import subprocess; p = subprocess.Popen(['sleep', '120']); print(p.pid); p.wait()"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    _append(key, child.pid, time.time())
    _append(key, grandchild, time.time())
    while True:
        pass


@task(backoff=NO_WAIT)
def returns_object():
    return object()


@task(backoff=NO_WAIT)
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}


# --- reliability tests (tests/test_reliability*.py) -------------------------------------------
# Lines here carry a fourth field, the process group of the worker that ran the task (each test
# worker runs in its own session), so a run can be traced back to a worker that was killed.


def _event(name):
    _append(name, os.getpid(), time.time(), os.getpgid(0))


@task(backoff=NO_WAIT)
def ledger_span(key, seconds):
    """Writes start:KEY, sleeps, writes end:KEY: overlapping runs of one job show up."""
    _event(f"start:{key}")
    time.sleep(seconds)
    _event(f"end:{key}")
    return key


@task(backoff=NO_WAIT, takes_context=True)
def ledger_span_reporting(context, key, seconds):
    """ledger_span that reports progress and logs a line as it starts and as it ends."""
    context.progress(0, 1, "starting")
    context.logger.info("starting %s", key)
    _event(f"start:{key}")
    time.sleep(seconds)
    context.progress(1, 1, "done")
    context.logger.info("done %s", key)
    _event(f"end:{key}")
    return key


@task(backoff=NO_WAIT, takes_context=True)
def slow_first_attempt(context, key, seconds):
    """Sleeps `seconds` on its first attempt only, so a handed-back job finishes quickly."""
    _event(f"start:{key}")
    if context.attempt == 1:
        time.sleep(seconds)
    _event(f"end:{key}")
    return context.attempt


@task(backoff=NO_WAIT, takes_context=True)
def cooperative(context, key):
    """Runs until an operator cancels it, then returns by itself."""
    _event(f"start:{key}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if context.cancel_requested():
            _event(f"noticed:{key}")
            return "stopped"
        time.sleep(0.05)
    _event(f"end:{key}")
    return "ran out"


@task(backoff=NO_WAIT)
def ignores_cancel(key):
    """Never looks at its context; an operator's cancel must stop it from outside."""
    _event(f"start:{key}")
    time.sleep(120)
    _event(f"end:{key}")


@task(backoff=NO_WAIT, max_attempts=3, takes_context=True)
def dies_first_attempt(context, key):
    """Kills its own process (the executor) on attempt 1, as an OOM kill or a segfault would."""
    _event(f"start:{key}")
    if context.attempt == 1:
        os.kill(os.getpid(), 9)
    _event(f"end:{key}")
    return context.attempt


@task(backoff=NO_WAIT)
def writes_db(key):
    """A task that writes to the database itself (SQLite: contends for the write lock)."""
    from django.db import transaction

    from jobs.models import CounterDelta

    with transaction.atomic():
        CounterDelta.objects.create(name="test_writes", value=1)
    _event(f"end:{key}")
    return key


@task(backoff=Exponential(base=1), max_attempts=100)
def fails_with_unbounded_backoff(key):
    """Exponential without a max (the contract's default): the delay doubles without limit."""
    _event(f"end:{key}")
    raise ConnectionError(key)


# --- execution core (tests/test_execution.py) -------------------------------------------------


@task(backoff=NO_WAIT, max_attempts=2)
def exits_hard(key):
    """Ends its executor process at once, as a crashing C extension or os._exit would."""
    _event(f"start:{key}")
    os._exit(3)


def _fork_and_wait(key, child):
    """Forks; the child leaves the task by returning, raising or raising SystemExit(5) (not
    os._exit), as a careless task's child would; the parent waits for it and returns its
    exit status."""
    pid = os.fork()
    if pid == 0:
        _event(f"child:{key}")
        if child == "raises":
            raise RuntimeError("the child's error")
        if child == "exits":
            raise SystemExit(5)
        return "the child's value"
    _, status = os.waitpid(pid, 0)
    return ["the parent's value", os.waitstatus_to_exitcode(status)]


@task(backoff=NO_WAIT, max_attempts=1)
def forks(key, child="returns"):
    _event(f"start:{key}")
    return _fork_and_wait(key, child)


@task(backoff=NO_WAIT, max_attempts=1)
async def forks_in_a_coroutine(key, child="returns"):
    _event(f"start:{key}")
    return _fork_and_wait(key, child)


def square(x):
    return x * x


@task(backoff=NO_WAIT, max_attempts=1)
def uses_multiprocessing(n):
    """A pool of processes, and a process of its own, as a task may start them."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        total = sum(pool.map(square, range(n)))
    process = multiprocessing.get_context("fork").Process(target=square, args=(n,))
    process.start()
    process.join()
    return [total, process.exitcode]


@task(backoff=NO_WAIT, max_attempts=3, on_crash="dead_letter")
def segfaults_no_retry(key):
    _event(f"start:{key}")
    os.kill(os.getpid(), signal.SIGSEGV)


@task(backoff=NO_WAIT, max_attempts=3, on_crash="dead_letter")
def long_first_attempt_no_crash_retry(key, seconds):
    """Sleeps `seconds` on its first run only; a crash of it is not retried."""
    _event(f"start:{key}")
    if _starts(key) < 2:
        time.sleep(seconds)
    _event(f"end:{key}")
    return key


@task(backoff=NO_WAIT, max_attempts=3)
def segfaults_then_succeeds(key):
    _event(f"start:{key}")
    if _starts(key) < 2:
        os.kill(os.getpid(), signal.SIGSEGV)
    return "second time lucky"


def _starts(key):
    path = os.environ.get("JOBSITE_TEST_LEDGER")
    if not path:
        return 0
    return Path(path).read_text().split().count(f"start:{key}")


class StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")


class StrNotAString(Exception):
    def __str__(self):
        return 42


class NothingPrints(Exception):
    def __str__(self):
        raise RuntimeError("no str")

    def __repr__(self):
        raise RuntimeError("no repr")


class CustomBase(BaseException):
    pass


class OddlyNamed(Exception):
    """Its module and name hold what no database column can: NUL and a lone surrogate."""


OddlyNamed.__module__ = "tests.odd\x00module\udc80"
OddlyNamed.__qualname__ = "Odd\nName\x00"


HOSTILE = {
    "str_raises": lambda: StrRaises("hidden"),
    "str_not_a_string": lambda: StrNotAString("hidden"),
    "nothing_prints": lambda: NothingPrints(),
    "keyboard_interrupt": lambda: KeyboardInterrupt("pressed by the task"),
    "system_exit": lambda: SystemExit(4),
    "generator_exit": lambda: GeneratorExit("closed"),
    "custom_base": lambda: CustomBase("a BaseException of its own"),
    "oddly_named": lambda: OddlyNamed("named oddly"),
}


@task(backoff=NoRetry())
def raises_hostile(kind):
    raise HOSTILE[kind]()


@task(backoff=NoRetry())
def raises_huge(size):
    raise ValueError("x" * size + "\nFORGED job 00000000 (tests.tasks.add) succeeded")


def recording_backoff(exception, task_result):
    """A custom backoff that writes down what it was given."""
    errors = [e.exception_class_path for e in task_result.errors]
    _event(f"backoff:{type(exception).__name__}:{task_result.attempts}:{','.join(errors)}")
    return 0


@task(backoff=recording_backoff, max_attempts=2, timeout=0.5)
def sleeps_past_timeout_with_callable(key):
    _event(f"start:{key}")
    time.sleep(30)


@task(backoff=recording_backoff, max_attempts=2)
def crashes_with_callable(key):
    _event(f"start:{key}")
    os._exit(3)


def broken_backoff(exception, task_result):
    raise LookupError("this backoff is broken")


@task(backoff=broken_backoff, max_attempts=3)
def fails_with_broken_backoff(key):
    raise ValueError(key)


@task(backoff=NO_WAIT, max_attempts=3, takes_context=True)
def snoozes_then_fails(context, key, times):
    """Snoozes (for no time) until its job has snoozed `times` times, then fails each attempt."""
    from jobs.errors import Snooze
    from jobs.models import Job

    _ledger(key)
    if Job.objects.get(id=context.job_id).snoozes < times:
        raise Snooze(0)
    raise ValueError(f"{key} failed on attempt {context.attempt}")


class SnoozeOfItsOwn(Snooze):
    """A Snooze that skipped Snooze's own checks and set seconds no snooze can wait."""

    def __init__(self):
        Exception.__init__(self, "a snooze of its own")
        self.seconds = float("nan")


@task(backoff=NO_WAIT, max_attempts=2)
def snoozes_for(seconds):
    raise Snooze(seconds) if seconds is not None else SnoozeOfItsOwn()


@task(backoff=NO_WAIT)
def returns_text(size):
    return "r" * size


# --- progress and log lines (jobs.reports) ------------------------------------------------------


def _wait_for_file(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


@task(backoff=NO_WAIT, takes_context=True)
def reports_steps(context, folder, steps):
    """Reports step i of `steps`, then waits until the test creates `folder`/go-i."""
    for i in range(steps):
        context.progress(i, steps, f"step {i}")
        context.logger.info("at step %d", i)
        _wait_for_file(Path(folder) / f"go-{i}")
    context.progress(steps, steps, "done")
    return steps


@task(backoff=NO_WAIT, takes_context=True)
def reports_then_fails_once(context, folder):
    """Attempt 1 reports 5 of 10 and fails; attempt 2 marks `folder`/second, waits for
    `folder`/go, then reports 1 of 1."""
    if context.attempt == 1:
        context.progress(5, 10, "first attempt")
        raise ValueError("first attempt fails")
    (Path(folder) / "second").touch()
    _wait_for_file(Path(folder) / "go")
    context.progress(1, 1, "second attempt")
    return "second"


@task(backoff=NO_WAIT)
def logs_elsewhere(text):
    """Logs `text` as a warning through a logger no one configured, as a library would."""
    logging.getLogger("tests.elsewhere").warning(text)


@task(backoff=NO_WAIT, takes_context=True)
def logs_lines(context, count, fail=False):
    """Logs `count` numbered lines (and fails after them when `fail`)."""
    for i in range(1, count + 1):
        context.logger.info("line %d of %d", i, count)
    if fail:
        raise ValueError("failed after logging")
    return count


@task(backoff=NO_WAIT, takes_context=True)
def logs_then_hangs(context, folder):
    """Reports and logs a first line; once the test creates `folder`/go, three more lines and
    its last progress, marks `folder`/hanging and hangs until it is stopped from outside."""
    context.progress(1, 2, "first step")
    context.logger.info("first line")
    _wait_for_file(Path(folder) / "go")
    for i in range(2, 5):
        context.logger.info("line %d", i)
    context.progress(2, 2, "last words")
    (Path(folder) / "hanging").touch()
    time.sleep(120)


@task(backoff=NO_WAIT, takes_context=True)
def logs_then_freezes(context):
    """Logs a line, then stops its own process (SIGSTOP): it answers nothing until killed."""
    context.logger.info("about to freeze")
    os.kill(os.getpid(), signal.SIGSTOP)


@task(backoff=NO_WAIT, takes_context=True)
def logs_hostile(context, text, wait_for=""):
    """Logs `text` and reports it as the progress message; waits for `wait_for` if given."""
    context.progress(1, 2, text)
    context.logger.warning(text)
    if wait_for:
        _wait_for_file(wait_for)
    return None


@task(backoff=NO_WAIT, takes_context=True)
async def async_reports(context, count):
    """An async def task reporting progress and logging a line at each of `count` steps."""
    for i in range(1, count + 1):
        context.progress(i, count, f"async step {i}")
        context.logger.info("async line %d", i)
        await asyncio.sleep(0)
    return count


@task(backoff=NO_WAIT)
def node(key, value=None):
    """A workflow node: records its run, returns `value`."""
    _ledger(key)
    return value


@task(backoff=NO_WAIT, takes_context=True)
def join(context, key):
    """A workflow node that returns what its upstream nodes returned."""
    _ledger(key)
    return context.upstream


@task(backoff=NO_WAIT, takes_context=True)
async def async_join(context, key):
    """An async def workflow node: returns what its upstream nodes returned, and what reading
    them as in a sync task does."""
    _ledger(key)
    sync_read = "no error"
    try:
        context.upstream  # noqa: B018 (read for what it raises)
    except Exception as e:
        sync_read = f"{type(e).__name__}: {e}"
    return {"upstream": await context.aupstream(), "sync_read": sync_read}


@task(backoff=NO_WAIT)
def batch_callback(batch_id, counts):
    """A batch callback: records its run, returns what it was given."""
    _ledger(f"callback-{batch_id}")
    return {"batch_id": batch_id, "counts": counts}


# --- async def tasks run as coroutines (tests/test_async_execution.py) ------------------------


@task(backoff=NO_WAIT)
async def awaits(key, seconds):
    """Writes start:KEY, awaits `seconds`, writes end:KEY."""
    _event(f"start:{key}")
    await asyncio.sleep(seconds)
    _event(f"end:{key}")
    return key


@task(backoff=NO_WAIT, takes_context=True)
async def awaits_on_first_attempt(context, key, seconds):
    """Awaits `seconds` on its first attempt only, so a retried job finishes at once."""
    _event(f"start:{key}")
    if context.attempt == 1:
        await asyncio.sleep(seconds)
    _event(f"end:{key}")
    return context.attempt


@task(backoff=NO_WAIT, max_attempts=1, timeout=1)
async def hangs(key):
    """Awaits for an hour: only its timeout's cancel ends it."""
    _event(f"start:{key}")
    await asyncio.sleep(3600)


@task(backoff=NO_WAIT, max_attempts=1, timeout=1)
async def ignores_cancellation(key):
    """Swallows every cancel and keeps awaiting: only stopping its executor ends it."""
    _event(f"start:{key}")
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            _event(f"ignored:{key}")


@task(backoff=NO_WAIT, max_attempts=3, takes_context=True)
async def exits_beside(context, key, prefix, neighbours):
    """On attempt 1, once `neighbours` jobs whose keys start with `prefix` have started,
    ends its executor process at once (os._exit); later attempts return."""
    _event(f"start:{key}")
    if context.attempt == 1:
        deadline = time.monotonic() + 10
        while _started_with(prefix) < neighbours and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        os._exit(3)
    _event(f"end:{key}")
    return context.attempt


def _started_with(prefix):
    path = os.environ.get("JOBSITE_TEST_LEDGER")
    if not path or not Path(path).exists():
        return 0
    return sum(1 for word in Path(path).read_text().split() if word.startswith(f"start:{prefix}"))


@task(backoff=NO_WAIT)
async def blocks_loop(key, seconds):
    """Holds the event loop: a blocking sleep inside async def."""
    _event(f"start:{key}")
    time.sleep(seconds)
    _event(f"end:{key}")
    return key


@task(backoff=NO_WAIT)
async def reads_jobs(job_id):
    """Uses the async ORM: reads a job and counts the jobs of its task."""
    from jobs.models import Job

    job = await Job.objects.aget(id=job_id)
    count = await Job.objects.filter(task_path=job.task_path).acount()
    return {"task_path": job.task_path, "count": count}


# --- transactions a task leaves open (tests/test_task_connections.py) -------------------------


def _row(name):
    from django.contrib.auth.models import Group  # a table nothing else here writes

    Group.objects.create(name=name)


def _leave_open(how, name):
    from django.db import transaction

    if how == "autocommit":
        transaction.set_autocommit(False)
    else:
        transaction.atomic().__enter__()
    _row(name)


@task(backoff=NO_WAIT)
def leaves_transaction_open(how, name):
    """Writes a row inside a transaction it never ends: autocommit off, or an atomic block."""
    _leave_open(how, name)
    return name


@task(backoff=NO_WAIT)
def writes_row(name):
    _row(name)
    return name


@task(backoff=NO_WAIT)
async def leaves_transaction_open_async(how, name):
    from asgiref.sync import sync_to_async

    await sync_to_async(_leave_open)(how, name)
    return name


@task(backoff=NO_WAIT)
async def writes_row_async(name):
    from asgiref.sync import sync_to_async

    await sync_to_async(_row)(name)
    return name


@task(backoff=NO_WAIT)
async def stops_its_loop(key, how):
    """Stops the executor's event loop: by loop.stop(), or by a task of its own that raises
    SystemExit, which asyncio lets out of the loop."""
    loop = asyncio.get_running_loop()
    if how == "stop":
        loop.stop()
    else:

        async def exits():
            raise SystemExit(4)

        loop.create_task(exits())
    await asyncio.sleep(0.2)
    _event(f"end:{key}")
    return key


@task(backoff=NO_WAIT, max_attempts=1)
async def closes_its_descriptors(key):
    """Closes every file descriptor of its process past the standard three (the executor's
    pipe and its event loop's among them), then awaits."""
    _event(f"start:{key}")
    os.closerange(3, 1024)
    await asyncio.sleep(0.2)
    return key


@task(backoff=NO_WAIT, limit_key=lambda args, kwargs: f"tenant-{kwargs['tenant_id']}")
def per_tenant(tenant_id):
    """Its limit key is computed from its arguments at enqueue."""
    return tenant_id
