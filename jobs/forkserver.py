"""Loaded once by the fork server that forks the worker's executors, before it forks any.

Django set up here, and the modules an executor runs, are shared by every executor the fork
server forks (copy-on-write) instead of being loaded again in each: an executor costs its own
few megabytes, not a whole Django, and starts in milliseconds.
"""

import os

if os.environ.get("DJANGO_SETTINGS_MODULE"):
    try:
        import django

        django.setup()
        from django.db import connections

        from . import runner  # noqa: F401

        # Setting up opens no connection; none may ever be inherited by a forked executor.
        connections.close_all()
    except Exception:
        pass  # each executor then sets Django up itself, and reports what fails there
