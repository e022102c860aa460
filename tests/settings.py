"""The project's settings for the test run, with a throwaway secret key.

Production settings refuse to load without DJANGO_SECRET_KEY. The key is put in the
environment before they load, so the worker and server subprocesses the tests start inherit it.
"""

import os
import secrets

os.environ.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))

from jobsite.settings import *  # noqa: F403

# Tests log in hundreds of times; the production hasher's cost buys nothing here.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
