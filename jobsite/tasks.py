"""Demo tasks for the quick start: some succeed, some fail once, some always fail."""

import random
import time

from jobs.compat import task
from jobs.errors import Unrecoverable
from jobs.retry import Exponential, Fixed, NoRetry


@task()
def add(a, b):
    return a + b


@task(queue_name="emails", max_attempts=3, backoff=Fixed(2, jitter=1), takes_context=True)
def send_welcome_email(context, user_id):
    if context.attempt == 1 and user_id % 3 == 0:
        raise ConnectionError(f"SMTP server refused the connection for user {user_id}")
    context.logger.info("sent welcome email to user %s", user_id)
    return {"user_id": user_id, "sent": True}


@task(queue_name="reports", max_attempts=3, backoff=Exponential(base=2, multiplier=2, jitter=1))
def build_report(report_id):
    time.sleep(random.uniform(0.05, 0.4))
    if report_id % 5 == 0:
        raise ValueError(f"report {report_id} references a missing column 'revenue_eur'")
    return {"report_id": report_id, "rows": random.randint(10, 500)}


@task(queue_name="billing", backoff=NoRetry())
def charge_card(invoice_id):
    raise Unrecoverable(f"card declined for invoice {invoice_id}: do not retry")


@task(queue_name="reports")
def publish_report(report_id):
    return {"published": report_id}


@task(timeout=1)
def slow_sync(seconds):
    time.sleep(seconds)
    return seconds


@task()
def noop():
    return None


@task()
def heartbeat_report():
    """Fired every minute by the demo's `heartbeat-report` schedule."""
    return {"ok": True, "checked": random.randint(1, 50)}


@task(queue_name="reports")
def nightly_cleanup():
    """Fired at 03:00 Paris time by the demo's `nightly-cleanup` schedule."""
    return {"removed": random.randint(0, 20)}


@task(queue_name="imports", timeout=600, takes_context=True)
def import_catalogue(context, supplier, seconds=180):
    """A long import that reports progress and stops early when an operator cancels it."""
    started = time.monotonic()
    step = 0
    while (elapsed := time.monotonic() - started) < seconds:
        if context.cancel_requested():
            context.logger.info("import from %s cancelled after %.0f s", supplier, elapsed)
            return {"supplier": supplier, "imported": step * 50, "complete": False}
        step += 1
        context.progress(int(elapsed), seconds, f"{step * 50:,} products from {supplier}")
        if step % 10 == 0:
            context.logger.info("import from %s: %s products so far", supplier, step * 50)
        time.sleep(1)
    context.progress(seconds, seconds, f"{step * 50:,} products from {supplier}: done")
    return {"supplier": supplier, "imported": step * 50, "complete": True}


@task(queue_name="inventory", max_attempts=6, backoff=Fixed(40, jitter=5), takes_context=True)
def sync_inventory(context, warehouse):
    """A flaky upstream: the first four attempts time out, the fifth gets through."""
    if context.attempt <= 4:
        raise TimeoutError(f"warehouse {warehouse} API did not answer within 30 s")
    return {"warehouse": warehouse, "synced": True, "attempts": context.attempt}


@task()
def batch_report(batch_id, counts):
    """A batch callback: on_success / on_finish get the batch id and its counts per state."""
    return {"batch_id": batch_id, "counts": counts}
