"""Delete old finished jobs: `manage.py prune_jobs --older-than 7d [--state ...] [--dry-run]`."""

import re
from argparse import ArgumentTypeError
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError

from jobs.maintenance import DEFAULT_PRUNE_STATES, PRUNE_BATCH_SIZE, prune_jobs
from jobs.management.arguments import whole_number
from jobs.management.database import ChecksExplained, database_errors_explained

UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
AGE = re.compile(r"(\d{1,6})([smhdw])")


def age(text: str) -> timedelta:
    """'30m', '12h', '7d', '2w' (and 's' for seconds) as a timedelta."""
    match = AGE.fullmatch(text.strip().lower())
    if not match:
        raise ArgumentTypeError(f"{text!r} is not an age like 30m, 12h, 7d or 2w")
    amount, unit = match.groups()
    older_than = timedelta(**{UNITS[unit]: int(amount)})
    try:
        datetime.now(UTC) - older_than
    except OverflowError:
        raise ArgumentTypeError(f"{text!r} reaches back before the year 1") from None
    return older_than


def state_list(text: str) -> list[str]:
    states = [s.strip() for s in text.split(",") if s.strip()]
    if not states:
        # An empty value (an unset shell variable, say) must not mean the default states.
        raise ArgumentTypeError(f"{text!r} names no state: give one or more, comma-separated")
    return states


class Command(ChecksExplained, BaseCommand):
    help = (
        "Delete finished jobs (with their attempts and audit entries) that finished longer ago "
        "than --older-than. Dead letters are kept unless dead_letter is named in --state."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            type=age,
            required=True,
            metavar="AGE",
            help="Finished longer ago than this: 30m, 12h, 7d, 2w.",
        )
        parser.add_argument(
            "--state",
            type=state_list,
            action="extend",
            dest="states",
            metavar="STATES",
            help=f"Comma-separated finished states (default: {','.join(DEFAULT_PRUNE_STATES)}).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number(1),
            default=PRUNE_BATCH_SIZE,
            help="Jobs deleted per transaction.",
        )

    def handle(self, *args, older_than, states, dry_run, batch_size, verbosity, **options):
        def progress(deleted, matched):
            if verbosity >= 1:
                self.stdout.write(f"deleted {deleted} of {matched}")

        try:
            with database_errors_explained(migrated=True):
                result = prune_jobs(
                    older_than,
                    states or DEFAULT_PRUNE_STATES,
                    dry_run=dry_run,
                    batch_size=batch_size,
                    progress=progress,
                )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        described = (
            f"{', '.join(result.states)} jobs finished before {result.cutoff:%Y-%m-%d %H:%M:%S %Z}"
        )
        if result.dry_run:
            self.stdout.write(f"Would delete {result.matched} {described} (dry run).")
        else:
            self.stdout.write(self.style.SUCCESS(f"Deleted {result.deleted} {described}."))
