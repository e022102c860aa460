"""Issue, list and revoke bearer tokens of the JSON API."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db.models import Q
from django.utils import timezone

from dashboard.models import ApiToken
from dashboard.permissions import can_operate, can_view
from jobs.management.arguments import whole_number
from jobs.management.database import ChecksExplained, database_errors_explained

# Ten years: far enough for any rotation policy, near enough for every date to stay valid.
MAX_DAYS = 3650


class Command(ChecksExplained, BaseCommand):
    help = (
        "Create an API token for USER and print it alone on the last line (it is shown once). "
        "--list shows tokens, --revoke PREFIX_OR_ID revokes one."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", nargs="?", metavar="USER")
        parser.add_argument("--name", default="", help="What the token is for, for listing.")
        parser.add_argument(
            "--expires-in",
            type=whole_number(1, MAX_DAYS, what="days"),
            default=None,
            metavar="DAYS",
            help="The token stops working after this many days (default: when revoked).",
        )
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--list", action="store_true", help="List tokens (of USER if given).")
        action.add_argument("--revoke", metavar="PREFIX_OR_ID", help="Revoke a token.")

    def handle(
        self, *args, username=None, name="", expires_in=None, list=False, revoke=None, **options
    ):
        if not (revoke or list or username):
            raise CommandError("name the USER the token acts as (or use --list / --revoke)")
        with database_errors_explained():
            if revoke:
                return self.revoke(revoke)
            if list:
                return self.list(username)
            return self.create(username, name, expires_in)

    def create(self, username, name, expires_in=None):
        user = self.user(username)
        if not can_view(user):
            self.stderr.write(
                f"warning: {username} is not an active staff user; the token will get 403."
            )
        elif not can_operate(user):
            self.stderr.write(
                f"note: {username} lacks jobs.operate_job; the token can read but not act."
            )
        expires_at = timezone.now() + timedelta(days=expires_in) if expires_in else None
        token, key = ApiToken.issue(user, name=name, expires_at=expires_at)
        until = f", valid until {_minute(expires_at)}" if expires_at else ""
        self.stdout.write(
            f"Created token {token.prefix} (id {token.pk}) for {username}{until}. "
            "Store it now; it cannot be shown again:"
        )
        self.stdout.write(key)

    def list(self, username):
        tokens = ApiToken.objects.select_related("user").order_by("created_at", "pk")
        if username:
            tokens = tokens.filter(user=self.user(username))
        self.stdout.write(
            f"{'id':>5}  {'prefix':12}  {'user':15}  {'created':16}  "
            f"{'last used':16}  {'expires':16}  {'status':7}  name"
        )
        for token in tokens:
            self.stdout.write(
                f"{token.pk:>5}  {token.prefix:12}  {token.user.get_username():15}  "
                f"{_minute(token.created_at):16}  {_minute(token.last_used_at):16}  "
                f"{_minute(token.expires_at):16}  {token.status:7}  {token.name}"
            )

    def revoke(self, prefix_or_id):
        match = Q(prefix=prefix_or_id)
        if prefix_or_id.isdigit():
            match |= Q(pk=int(prefix_or_id))
        tokens = list(ApiToken.objects.filter(match))
        if not tokens:
            raise CommandError(f"no token has the id or prefix {prefix_or_id!r}")
        if len(tokens) > 1:
            raise CommandError(f"{prefix_or_id!r} names {len(tokens)} tokens; give its id")
        token = tokens[0]
        revoked = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if revoked:
            self.stdout.write(f"Revoked token {token.prefix} (id {token.pk}) of {token.user}.")
        else:
            self.stdout.write(f"Token {token.prefix} (id {token.pk}) was already revoked.")

    def user(self, username):
        User = get_user_model()
        try:
            return User.objects.get_by_natural_key(username)
        except User.DoesNotExist:
            raise CommandError(f"no user named {username!r}") from None


def _minute(moment):
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M") if moment else "-"
