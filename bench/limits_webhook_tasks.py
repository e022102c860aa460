"""jobsite's task of the webhook scenario (bench/limits_webhook.py)."""

from django.tasks import task

from bench.limits_webhook_partner import deliver
from jobs.retry import Fixed


@task(max_attempts=50, backoff=Fixed(1))
async def webhook(port, tenant, job):
    """One webhook call; a 429 fails the attempt and it is retried a second later."""
    await deliver(port, tenant, job)
