"""Which columns of a job and an attempt the API shows and the console's lists load, derived
from the models so a new field needs no second list."""

from jobs.models import Attempt, Job

# Columns about how the engine runs a job, not what the job is: the API leaves them out.
ENGINE_ONLY = frozenset({"backend", "timeout", "backoff", "lease_id", "lease_expires_at"})
# Columns a list row never shows, and the largest ones: only a job's own page reads them.
DETAIL_ONLY = frozenset({"args", "kwargs", "error_traceback", "return_value"})

_SHOWN = [field for field in Job._meta.concrete_fields if field.name not in ENGINE_ONLY]
# The job as the API shows it: the contract's fields and the documented extensions (the
# worker holding it, whether a cancel was asked for, its schedule and fire time).
JOB_FIELDS = tuple(field.name for field in _SHOWN)
# What to load for JOB_FIELDS (the foreign keys as their ids).
JOB_COLUMNS = tuple(field.attname for field in _SHOWN)
# What to load for the API's job (`lease_lapsed` reads the lease's end, not shown itself).
API_COLUMNS = (*JOB_COLUMNS, "lease_expires_at")
# What a row of the console's job and dead-letter lists reads.
LIST_COLUMNS = tuple(field.attname for field in _SHOWN if field.name not in DETAIL_ONLY)

ATTEMPT_FIELDS = tuple(
    field.name for field in Attempt._meta.concrete_fields if field.name not in ("id", "job")
)
