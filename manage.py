#!/usr/bin/env python
import os
import sys


def main():
    if sys.argv[1:2] == ["worker"]:
        from jobs import startup_signals

        startup_signals.hold()  # a stop request while Django starts still ends cleanly
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jobsite.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        if "DJANGO_SECRET_KEY" not in str(exc):
            raise
        sys.exit(f"error: {exc}")  # what to set, without a traceback


if __name__ == "__main__":
    main()
