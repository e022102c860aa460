"""The OpenAPI 3 description of the JSON API, served at /api/v1/openapi.json: its paths,
parameters and responses. The bodies' schemas are in `openapi_schemas`."""

from jobs.states import JobState

from .openapi_schemas import ANY, SCHEMAS, UUID, ref
from .pagination import DEFAULT_LIMIT, MAX_LIMIT


def _json(description, schema_name, **extra):
    return {
        "description": description,
        "content": {"application/json": {"schema": ref(schema_name)}},
        **extra,
    }


ERRORS = {
    "400": _json("Malformed input: unknown or repeated parameters, bad values.", "Error"),
    "401": _json(
        "No credentials, or a bad or revoked token.",
        "Error",
        headers={"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    "403": _json(
        "Not staff, lacking jobs.operate_job for an action, or a session POST without CSRF.",
        "Error",
    ),
    "413": _json(
        "A body larger than the server reads (DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB by default).",
        "Error",
    ),
    "500": _json("The server failed; the error is logged with its traceback.", "Error"),
    "503": _json("The database cannot be reached now: try again (Retry-After).", "Error"),
}
NOT_FOUND = {"404": _json("No job has this id.", "Error")}
RERUN_BODY = {
    "required": False,
    "description": "Edit and rerun: new arguments for the new run (each optional).",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {
                    "args": {"type": "array", "items": ANY},
                    "kwargs": {"type": "object", "additionalProperties": ANY},
                },
                "additionalProperties": False,
            }
        }
    },
}
NO_NUL = {"type": "string", "pattern": "^[^\\u0000]*$"}
BULK_BODY = {
    "required": True,
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["action", "filter"],
                "properties": {
                    "action": {"type": "string", "enum": ["retry", "cancel", "discard"]},
                    "filter": {
                        "type": "object",
                        "description": "Empty strings match anything; {} acts on every job.",
                        "properties": {
                            "state": {
                                "type": "string",
                                "enum": ["", *[s.value for s in JobState]],
                            },
                            "queue": NO_NUL,
                            "task": NO_NUL,
                            "q": {**NO_NUL, "maxLength": 200},
                        },
                        "additionalProperties": False,
                    },
                    "dry_run": {"type": "boolean", "default": False},
                },
                "additionalProperties": False,
            }
        }
    },
}


def _path_parameter(name, schema):
    """A part of the path that names what the operation acts on."""
    return {"name": name, "in": "path", "required": True, "schema": schema}


QUEUE_NAME = _path_parameter("name", {"type": "string", "minLength": 1, "maxLength": 100})


def _queue_action(summary):
    return {
        "post": {
            "summary": summary,
            "description": "Needs jobs.operate_job. Audited.",
            "parameters": [QUEUE_NAME],
            "responses": {"200": _json("The queue.", "Queue"), **ERRORS},
        }
    }


JOB_ID = _path_parameter("job_id", UUID)


def _list_parameter(name, schema, description):
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


LIST_PARAMETERS = [
    _list_parameter(
        "state",
        {"type": "string", "enum": ["", *[s.value for s in JobState]]},
        "Only jobs in this state (an empty value, like any empty filter, is ignored).",
    ),
    _list_parameter("queue", {"type": "string"}, "Only jobs of this queue."),
    _list_parameter("task", {"type": "string"}, "Only jobs of this task path."),
    _list_parameter(
        "q",
        {"type": "string", "maxLength": 200},
        "Search: an id prefix (6+ hex characters), part of the task path, of a string argument "
        "(any depth), of the dedup key or of the error; or a number equal to a numeric argument.",
    ),
    _list_parameter(
        "limit",
        {"type": "integer", "format": "int32", "default": DEFAULT_LIMIT},
        f"Page size, clamped to 1-{MAX_LIMIT}.",
    ),
    _list_parameter(
        "cursor",
        # Opaque and signed: only a next_cursor the API returned is valid (anything else is a 400).
        {"type": "string", "format": "jobsite-cursor"},
        "The next_cursor of the previous page.",
    ),
]


def _action(summary, description, ok_status, ok_description, *, ok_schema="Job", body=None):
    return {
        "post": {
            "summary": summary,
            "description": description,
            "parameters": [JOB_ID],
            **({"requestBody": body} if body else {}),
            "responses": {
                ok_status: _json(ok_description, ok_schema),
                "409": _json("Not allowed in the job's state; says why.", "Conflict"),
                **ERRORS,
                **NOT_FOUND,
            },
        },
    }


SCHEDULE_NAME = _path_parameter("name", {"type": "string"})
NO_SCHEDULE = {"404": _json("No schedule has this name.", "Error")}


WORKFLOW_ID = _path_parameter("workflow_id", {"type": "string"})
NO_WORKFLOW = {"404": _json("No workflow has this id.", "Error")}


def _workflow_action(summary):
    return {
        "post": {
            "summary": summary,
            "description": "Needs jobs.operate_job. `changed`: how many nodes it changed.",
            "parameters": [WORKFLOW_ID],
            "responses": {
                "200": _json("The workflow after the action.", "WorkflowActed"),
                **ERRORS,
                **NO_WORKFLOW,
            },
        },
    }


def _schedule_action(summary, ok_status, ok_description, schema_name):
    return {
        "post": {
            "summary": summary,
            "description": "Needs jobs.operate_job.",
            "parameters": [SCHEDULE_NAME],
            "responses": {
                ok_status: _json(ok_description, schema_name),
                **ERRORS,
                **NO_SCHEDULE,
            },
        },
    }


def document(base: str = "/api/v1") -> dict:
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "jobsite",
            "version": "1",
            "description": (
                "Background jobs: list, inspect, retry, rerun and cancel them, and read their "
                "counts. Authenticate with `Authorization: Bearer <token>` (see `manage.py "
                "create_api_token`) or a staff session; session POSTs need a CSRF token. "
                "Prometheus metrics are at /metrics, with the same authentication."
            ),
        },
        "servers": [{"url": base}],
        "security": [{"bearerAuth": []}, {"sessionCookie": []}],
        "paths": {
            "/jobs": {
                "get": {
                    "summary": "List jobs, newest first",
                    "parameters": LIST_PARAMETERS,
                    "responses": {"200": _json("A page of jobs.", "JobList"), **ERRORS},
                }
            },
            "/jobs/{job_id}": {
                "get": {
                    "summary": "A job with its attempts",
                    "parameters": [JOB_ID],
                    "responses": {
                        "200": _json("The job.", "JobDetail"),
                        **ERRORS,
                        **NOT_FOUND,
                    },
                }
            },
            "/jobs/{job_id}/logs": {
                "get": {
                    "summary": "The lines a job's attempt logged through context.logger",
                    "description": (
                        "An attempt keeps at most 1,000 lines and 256 KB: its first and its "
                        "last lines, a line of level CUT where the rest were cut. Lines are "
                        "written about once a second while the attempt runs."
                    ),
                    "parameters": [
                        JOB_ID,
                        {
                            "name": "attempt",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1},
                            "description": "The attempt's number; the latest when not given.",
                        },
                    ],
                    "responses": {
                        "200": _json("The attempt's lines, oldest first.", "JobLog"),
                        **ERRORS,
                        "404": _json("No job has this id, or it has no such attempt.", "Error"),
                    },
                }
            },
            "/jobs/{job_id}/retry": _action(
                "Retry a dead-lettered or cancelled job (same row, back to pending)",
                "Needs jobs.operate_job.",
                "200",
                "The job, back in line.",
            ),
            "/jobs/{job_id}/rerun": _action(
                "Rerun a finished job as a new job, optionally with new arguments",
                "Needs jobs.operate_job. The Location header names the new job. Arguments are "
                "checked like an enqueue's: a bad value is a 400 and creates nothing.",
                "201",
                "The new job; its rerun_of is the original.",
                body=RERUN_BODY,
            ),
            "/jobs/{job_id}/discard": _action(
                "Delete a finished job (succeeded, cancelled, dead letter) and its attempts",
                "Needs jobs.operate_job. The audit entry keeps the job's id and task.",
                "200",
                "The id of the deleted job.",
                ok_schema="Discarded",
            ),
            "/jobs/bulk": {
                "post": {
                    "summary": "Retry, cancel or discard every job a filter matches",
                    "description": (
                        "Needs jobs.operate_job. Each job goes through the same guarded action; "
                        "jobs not allowed in their state count in matched only. With dry_run, "
                        "nothing changes and applied is 0. One audit entry per call."
                    ),
                    "requestBody": BULK_BODY,
                    "responses": {"200": _json("The counts.", "BulkResult"), **ERRORS},
                }
            },
            "/queues": {
                "get": {
                    "summary": "Every queue: paused or not, counts per state, oldest due job",
                    "responses": {"200": _json("The queues.", "QueueList"), **ERRORS},
                }
            },
            "/queues/{name}/pause": _queue_action("Pause a queue: workers claim nothing from it"),
            "/queues/{name}/resume": _queue_action("Resume a paused queue"),
            "/jobs/{job_id}/cancel": _action(
                "Cancel a job that has not finished (a running one is stopped by its worker)",
                "Needs jobs.operate_job.",
                "200",
                "The job, cancelled (or running with cancel_requested_at set).",
            ),
            "/jobs/{job_id}/run-now": _action(
                "Extension: make a pending or retrying job waiting for a later run_after due now",
                "Needs jobs.operate_job. 409 when the job is not waiting for a later moment.",
                "200",
                "The job, its run_after now.",
            ),
            "/schedules": {
                "get": {
                    "summary": "Every schedule with its state, next fire time and last job",
                    "responses": {"200": _json("The schedules.", "ScheduleList"), **ERRORS},
                }
            },
            "/schedules/{name}/pause": _schedule_action(
                "Pause a schedule (it fires nothing until resumed)",
                "200",
                "The schedule, paused.",
                "Schedule",
            ),
            "/schedules/{name}/resume": _schedule_action(
                "Resume a schedule from its next fire time (nothing missed is back-filled)",
                "200",
                "The schedule, active.",
                "Schedule",
            ),
            "/schedules/{name}/trigger": _schedule_action(
                "Run a schedule now: one job, its scheduled_at null",
                "201",
                "The new job.",
                "Job",
            ),
            "/workflows": {
                "get": {
                    "summary": "Workflows and batches, newest first, with their progress",
                    "parameters": [p for p in LIST_PARAMETERS if p["name"] in ("limit", "cursor")],
                    "responses": {"200": _json("A page of workflows.", "WorkflowList"), **ERRORS},
                }
            },
            "/workflows/{workflow_id}": {
                "get": {
                    "summary": "A workflow with its nodes and their after lists",
                    "parameters": [WORKFLOW_ID],
                    "responses": {
                        "200": _json("The workflow.", "WorkflowDetail"),
                        **ERRORS,
                        **NO_WORKFLOW,
                    },
                }
            },
            "/workflows/{workflow_id}/cancel": _workflow_action(
                "Cancel every unfinished node (running ones are asked to stop); a batch's "
                "on_finish still runs once every job has ended"
            ),
            "/workflows/{workflow_id}/retry-failed": _workflow_action(
                "Extension: retry every failed node; the nodes its failure cancelled wait again"
            ),
            "/metrics/summary": {
                "get": {
                    "summary": "Jobs per state and per queue, and the lifetime counters",
                    "responses": {"200": _json("The counts.", "Summary"), **ERRORS},
                }
            },
        },
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearerAuth": {"type": "http", "scheme": "bearer"},
                "sessionCookie": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
            },
        },
    }
