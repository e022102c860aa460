"""The project's settings for the test run, with a throwaway secret key.

Production settings refuse to load without DJANGO_SECRET_KEY. The key (and an empty
JOBSITE_SCHEDULES) is put in the environment before they load, so the worker and server
subprocesses the tests start inherit it.
"""

import os
import secrets

os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
# No demo schedules, here or in the workers the tests start: tests declare their own.
os.environ["JOBSITE_SCHEDULES"] = "{}"

from jobsite.settings import *  # noqa: F403

# Tests log in hundreds of times; the production hasher's cost buys nothing here.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The test process's own connections are told apart from its workers' (application_name
# "jobsite", from the project settings the workers load): the reliability tests cut the workers'
# connections, and must never cut one of the test's own. Playwright's event loop gives the test
# process connections beside the main one, which pg_backend_pid() alone would not exclude.
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"]["OPTIONS"]["application_name"] = "jobsite-tests"  # noqa: F405
