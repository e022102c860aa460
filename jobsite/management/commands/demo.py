import secrets
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from jobs import actions
from jobs.eager import run_inline
from jobs.models import Job


class Command(BaseCommand):
    help = "Seed demo jobs and create a console login (for the quick start)."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--no-jobs", action="store_true", help="only create the login")
        parser.add_argument(
            "--again",
            action="store_true",
            help="seed demo jobs even if the database already has jobs",
        )
        parser.add_argument(
            "--url",
            default="http://127.0.0.1:8000/",
            help="where the console is served, for the message at the end",
        )

    def handle(self, *args, username, no_jobs, url, again, **options):
        password = self._login(username)
        existing = Job.objects.count()
        if existing and not again and not no_jobs:
            self.stdout.write(
                f"the database already has {existing} jobs: no demo jobs added "
                "(manage.py demo --again adds another set)"
            )
        elif not no_jobs:
            self._seed()
        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"Console: {url}"))
        self.stdout.write(self.style.SUCCESS(f"Login:   {username} / {password}"))

    def _login(self, username):
        """A staff user allowed to operate; the password is kept so reruns print the same."""
        secret_file = Path(settings.BASE_DIR) / ".demo" / "login.txt"
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user and secret_file.exists():
            return secret_file.read_text().strip()
        password = secrets.token_urlsafe(12)
        if user is None:
            user = User.objects.create_user(username=username, is_staff=True)
        user.is_staff = True
        user.set_password(password)
        user.save()
        user.user_permissions.add(
            Permission.objects.get(codename="operate_job", content_type__app_label="jobs")
        )
        secret_file.parent.mkdir(exist_ok=True)
        secret_file.write_text(password + "\n")
        return password

    def _seed(self):
        from jobsite.tasks import (
            add,
            build_report,
            charge_card,
            import_catalogue,
            publish_report,
            send_welcome_email,
            sync_inventory,
        )

        steps = 9
        self._progress(1, steps, "a finished history: a dead letter and its rerun")
        declined = charge_card.enqueue(1001)
        run_inline(declined.id, backend=charge_card.get_backend())
        actions.rerun(declined.id)

        self._progress(2, steps, "20 quick jobs that succeed")
        add.enqueue_many([((i, i * 2), {}) for i in range(20)])

        self._progress(3, steps, "12 welcome emails (every third fails once, then succeeds)")
        for user_id in range(1, 13):
            send_welcome_email.enqueue(user_id)

        self._progress(4, steps, "10 reports (two keep failing and become dead letters)")
        for report_id in range(1, 11):
            build_report.enqueue(report_id)

        self._progress(5, steps, "a report with a continuation that publishes it")
        with transaction.atomic():
            parent = build_report.enqueue(42)
            publish_report.using(after=parent.id).enqueue(42)

        self._progress(6, steps, "two card charges that are declined (dead letters at once)")
        charge_card.enqueue(1002)
        charge_card.enqueue(1003)

        # What keeps the console moving after the first minute.
        self._progress(7, steps, "a catalogue import that runs for three minutes")
        import_catalogue.enqueue("acme", seconds=180)

        self._progress(8, steps, "an inventory sync whose upstream fails four times first")
        sync_inventory.enqueue("north")

        self._progress(9, steps, "emails and reports due later (in 2 to 30 minutes)")
        now = timezone.now()
        for minutes, user_id in [(2, 101), (5, 102), (10, 103)]:
            send_welcome_email.using(run_after=now + timedelta(minutes=minutes)).enqueue(user_id)
        build_report.using(run_after=now + timedelta(minutes=30), priority=5).enqueue(77)
        total = Job.objects.count()
        self.stdout.write(f"demo ready: {total} jobs in the database")

    def _progress(self, step, steps, text):
        self.stdout.write(f"[{step}/{steps}] seeding {text}")
