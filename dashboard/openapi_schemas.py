"""The schemas of the JSON API's bodies: the `components` of its OpenAPI document (`openapi`)."""

from jobs.states import AttemptOutcome, DeadLetterReason, JobState

from .columns import JOB_FIELDS
from .pagination import MAX_LIMIT


def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema):
    return {**schema, "nullable": True}


def every_property_required(properties: dict) -> dict:
    return {"type": "object", "required": list(properties), "properties": properties}


TIME = {"type": "string", "format": "date-time"}
UUID = {"type": "string", "format": "uuid"}
ANY = {"nullable": True, "description": "Any JSON value."}

JOB = {
    "type": "object",
    "required": [*JOB_FIELDS, "reruns", "lease_lapsed"],
    "properties": {
        "lease_lapsed": {
            "type": "boolean",
            "description": (
                "Extension: the job is running by its state, but its worker stopped renewing "
                "the lease: it runs nowhere any more, and the next worker to look recovers it "
                "(its attempt recorded as WorkerLost)."
            ),
        },
        "reruns": {
            "type": "array",
            "items": UUID,
            "description": "The runs made from this job (reruns), newest first.",
        },
        "id": UUID,
        "task_path": {"type": "string"},
        "args": {"type": "array", "items": ANY},
        "kwargs": {"type": "object", "additionalProperties": ANY},
        "queue_name": {"type": "string"},
        "priority": {"type": "integer", "minimum": -100, "maximum": 100},
        "state": {"type": "string", "enum": [s.value for s in JobState]},
        "attempt": {"type": "integer", "minimum": 0},
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": 100},
        "run_after": TIME,
        "not_after": nullable(TIME),
        "dedup_key": nullable({"type": "string"}),
        "rerun_of": nullable({**UUID, "description": "The job this one is a rerun of."}),
        "parent": nullable({**UUID, "description": "The job this continuation waits for."}),
        "enqueued_at": TIME,
        "started_at": nullable(TIME),
        "finished_at": nullable(TIME),
        "error_type": {"type": "string"},
        "error_message": {"type": "string"},
        "error_traceback": {"type": "string"},
        "dead_letter_reason": {
            "type": "string",
            "enum": ["", *[r.value for r in DeadLetterReason]],
        },
        "return_value": ANY,
        "worker_id": {"type": "string", "description": "Extension: the worker holding the job."},
        "cancel_requested_at": nullable(
            {**TIME, "description": "Extension: when a cancel of the running job was asked."}
        ),
        "progress": nullable(
            {
                **every_property_required(
                    {
                        "done": {"type": "number", "minimum": 0},
                        "total": nullable({"type": "number", "minimum": 0}),
                        "message": {"type": "string"},
                        "updated_at": TIME,
                    }
                ),
                "description": (
                    "What the task last reported with context.progress(done, total, message), "
                    "written at most once a second while it runs and always at its end; null "
                    "when it never reported any."
                ),
            }
        ),
        "schedule": nullable({"type": "string", "description": "The schedule that made it."}),
        "scheduled_at": nullable(
            {**TIME, "description": "Its schedule's fire time; null for a run now."}
        ),
        "limit_key": nullable(
            {"type": "string", "description": "The key its `key:` limit budgets it under."}
        ),
        "snoozes": {
            "type": "integer",
            "minimum": 0,
            "description": "Attempts given back by Snooze (not counted in `attempt`).",
        },
        "workflow_id": nullable({**UUID, "description": "The workflow or batch it is a node of."}),
        "node_name": {"type": "string", "description": "Extension: its name in its workflow."},
        "waiting_for": {
            "type": "integer",
            "minimum": 0,
            "description": "Extension: upstream jobs it still waits for (while scheduled).",
        },
        "runs_on_upstream_failure": {
            "type": "boolean",
            "description": 'Extension: added with on_upstream_failure="run".',
        },
    },
}

WORKFLOW_PROPERTIES = {
    "id": UUID,
    "name": {"type": "string"},
    "kind": {"type": "string", "enum": ["workflow", "batch"]},
    "state": {
        "type": "string",
        "enum": ["empty", "pending", "running", "succeeded", "failed", "cancelled"],
    },
    "counts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    "done": {"type": "integer", "minimum": 0},
    "total": {"type": "integer", "minimum": 0},
    "created_at": TIME,
    "started_at": nullable(TIME),
    "finished_at": nullable(TIME),
    "duration_seconds": nullable({"type": "number"}),
}
WORKFLOW_NODE = {
    "allOf": [
        ref("Job"),
        {
            "type": "object",
            "required": ["after", "layer"],
            "properties": {
                "after": {"type": "array", "items": UUID},
                "layer": {"type": "integer", "minimum": 0},
            },
        },
    ]
}

SCHEDULE = every_property_required(
    {
        "name": {"type": "string"},
        "task_path": {"type": "string"},
        "cron": nullable({"type": "string", "description": "5 fields; null for `every`."}),
        "every": nullable({"type": "number", "minimum": 1, "description": "Seconds."}),
        "timezone": {"type": "string", "description": "IANA name; applies to cron."},
        "paused": {"type": "boolean"},
        "next_fire_at": nullable({**TIME, "description": "Null while paused."}),
        "last_job": nullable({**ref("Job"), "description": "The newest job it made."}),
        "description": {"type": "string", "description": "Extension: the fire times in words."},
        "missed": {
            "type": "string",
            "enum": ["latest", "skip", "all"],
            "description": "Extension: the missed-fire policy.",
        },
        "last_fire_at": nullable(
            {**TIME, "description": "Extension: the last fire time done (fired or passed over)."}
        ),
    }
)

ATTEMPT = every_property_required(
    {
        "number": {"type": "integer", "minimum": 1},
        "worker_id": {"type": "string"},
        "started_at": nullable(TIME),
        "finished_at": nullable(TIME),
        "outcome": {"type": "string", "enum": [o.value for o in AttemptOutcome]},
        "error_type": {"type": "string"},
        "error_message": {"type": "string"},
        "error_traceback": {"type": "string"},
    }
)

LOG_LINE = every_property_required(
    {
        "time": TIME,
        "level": {
            "type": "string",
            "description": "The logging level's name; CUT for the line marking a cut.",
        },
        "message": {"type": "string"},
    }
)
JOB_LOG = every_property_required(
    {
        "job_id": UUID,
        "attempt": {"type": "integer", "minimum": 1},
        "running": {"type": "boolean", "description": "Whether the attempt is still running."},
        "cut": {
            "type": "integer",
            "minimum": 0,
            "description": "Lines logged but not kept (0 when every line was kept).",
        },
        "lines": {"type": "array", "items": LOG_LINE, "maxItems": 1001},
    }
)

COUNTS = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}

SCHEMAS = {
    "Job": JOB,
    "Workflow": every_property_required(WORKFLOW_PROPERTIES),
    "WorkflowDetail": every_property_required(
        {**WORKFLOW_PROPERTIES, "nodes": {"type": "array", "items": ref("WorkflowNode")}}
    ),
    "WorkflowNode": WORKFLOW_NODE,
    "WorkflowActed": every_property_required(
        {**WORKFLOW_PROPERTIES, "changed": {"type": "integer", "minimum": 0}}
    ),
    "WorkflowList": {
        "type": "object",
        "required": ["results", "next_cursor"],
        "properties": {
            "results": {"type": "array", "items": ref("Workflow"), "maxItems": MAX_LIMIT},
            "next_cursor": nullable({"type": "string"}),
        },
    },
    "Schedule": SCHEDULE,
    "ScheduleList": {
        "type": "object",
        "required": ["results"],
        "properties": {"results": {"type": "array", "items": ref("Schedule")}},
    },
    "Attempt": ATTEMPT,
    "JobLog": JOB_LOG,
    "JobDetail": {
        "allOf": [
            ref("Job"),
            {
                "type": "object",
                "required": ["attempts"],
                "properties": {"attempts": {"type": "array", "items": ref("Attempt")}},
            },
        ]
    },
    "JobList": {
        "type": "object",
        "required": ["results", "next_cursor"],
        "properties": {
            "results": {"type": "array", "items": ref("Job"), "maxItems": MAX_LIMIT},
            "next_cursor": nullable(
                {"type": "string", "description": "Pass as `cursor` for the next page."}
            ),
        },
    },
    "Summary": {
        "type": "object",
        "required": ["states", "queues", "counters"],
        "properties": {
            "states": {**COUNTS, "description": "Jobs per state (every state present)."},
            "queues": {
                "type": "object",
                "description": "Per queue, jobs per state.",
                "additionalProperties": COUNTS,
            },
            "counters": {
                **COUNTS,
                "description": (
                    "Lifetime counters: jobs_enqueued, jobs_succeeded, jobs_failed (every failed "
                    "attempt), jobs_requeued (failures that scheduled a retry), "
                    "jobs_dead_lettered, jobs_recovered, jobs_cancelled."
                ),
            },
        },
    },
    "Queue": {
        "type": "object",
        "required": ["name", "paused", "counts", "oldest_due_at"],
        "properties": {
            "name": {"type": "string"},
            "paused": {"type": "boolean"},
            "counts": {
                **COUNTS,
                "description": (
                    "Jobs per state: exact up to 1,000 per state, shared out from a sample "
                    "beyond (as on the overview)."
                ),
            },
            "oldest_due_at": nullable(TIME),
        },
    },
    "QueueList": {
        "type": "object",
        "required": ["results"],
        "properties": {"results": {"type": "array", "items": ref("Queue")}},
    },
    "Discarded": {
        "type": "object",
        "required": ["discarded"],
        "properties": {"discarded": UUID},
    },
    "BulkResult": {
        "type": "object",
        "required": ["matched", "applied"],
        "properties": {
            "matched": {"type": "integer", "minimum": 0},
            "applied": {"type": "integer", "minimum": 0},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}},
        "additionalProperties": True,
    },
    "Conflict": {
        "type": "object",
        "required": ["error", "job"],
        "properties": {
            "error": {"type": "string", "description": "Why the action was not taken."},
            "job": ref("Job"),
            "held_by": {
                **UUID,
                "description": "A retry refused because this job holds the same dedup_key.",
            },
        },
    },
}
