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
