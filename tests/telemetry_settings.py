"""Settings for worker subprocesses whose spans and Sentry envelopes a test reads
(tests.telemetry); SENTRY_* options from the environment."""

import os

from tests.settings import *  # noqa: F403
from tests.telemetry import configure_from_environment

TASKS["default"]["OPTIONS"]["SENTRY_CAPTURE"] = os.environ.get(  # noqa: F405
    "JOBSITE_TEST_SENTRY_CAPTURE", "dead_letter"
)
TASKS["default"]["OPTIONS"]["SENTRY_CRONS"] = True  # noqa: F405
if os.environ.get("JOBSITE_TEST_SCHEDULES"):
    import json

    TASKS["default"]["OPTIONS"]["SCHEDULES"] = json.loads(os.environ["JOBSITE_TEST_SCHEDULES"])  # noqa: F405

configure_from_environment()
