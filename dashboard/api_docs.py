"""The JSON API's documentation page, read from the OpenAPI document the API serves.

The page is drawn on the server from `openapi.document`, the same dictionary served at
`api/v1/openapi.json`: one description of the API, no script and no asset beyond the console's
own stylesheet, so the strict Content-Security-Policy holds.
"""

from dataclasses import dataclass

METHODS = ("get", "post", "put", "patch", "delete")


@dataclass(frozen=True, kw_only=True, slots=True)
class TypeText:
    text: str
    # The schema named by a $ref, linked on the page.
    ref: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Field:
    name: str
    where: str
    type: TypeText
    required: bool
    description: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Response:
    status: str
    description: str
    type: TypeText | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Operation:
    method: str
    path: str
    anchor: str
    summary: str
    description: str
    parameters: list[Field]
    body: list[Field]
    body_type: TypeText | None
    responses: list[Response]


@dataclass(frozen=True, kw_only=True, slots=True)
class Schema:
    name: str
    description: str
    fields: list[Field]
    type: TypeText


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiDocs:
    title: str
    version: str
    description: str
    base: str
    operations: list[Operation]
    schemas: list[Schema]


def ref_name(schema: dict) -> str:
    return schema.get("$ref", "").rpartition("/")[2]


def type_text(schema: dict | None) -> TypeText:
    """A schema in a few words: "string (uuid) or null", "array of Job", "one of a, b"."""
    if not schema:
        return TypeText(text="any")
    if "$ref" in schema:
        return TypeText(text=ref_name(schema), ref=ref_name(schema))
    kind = schema.get("type", "any")
    ref = ""
    if kind == "array":
        items = type_text(schema.get("items"))
        text, ref = f"array of {items.text}", items.ref
    elif "enum" in schema:
        values = [repr(v) if v == "" else str(v) for v in schema["enum"]]
        text = f"{kind}, one of {', '.join(values)}"
    elif kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        text = "object of any values"
    else:
        text = kind
        if schema.get("format"):
            text += f" ({schema['format']})"
    limits = [
        f"{word} {schema[key]}"
        for key, word in (
            ("minimum", "≥"),
            ("maximum", "≤"),
            ("minLength", "length ≥"),
            ("maxLength", "length ≤"),
            ("default", "default"),
        )
        if key in schema
    ]
    if limits:
        text += f"; {', '.join(limits)}"
    if schema.get("nullable"):
        text += " or null"
    return TypeText(text=text, ref=ref)


def _fields(schema: dict, where: str = "body") -> list[Field]:
    required = set(schema.get("required", ()))
    return [
        Field(
            name=name,
            where=where,
            type=type_text(prop),
            required=name in required,
            description=prop.get("description", ""),
        )
        for name, prop in schema.get("properties", {}).items()
    ]


def _json_schema(part: dict | None) -> dict | None:
    if not part:
        return None
    return part.get("content", {}).get("application/json", {}).get("schema")


def _operation(path: str, method: str, spec: dict) -> Operation:
    body_schema = _json_schema(spec.get("requestBody"))
    inline_body = body_schema is not None and "$ref" not in body_schema
    return Operation(
        method=method.upper(),
        path=path,
        anchor=f"{method}-{path.strip('/').replace('/', '-').replace('{', '').replace('}', '')}",
        summary=spec.get("summary", ""),
        description=" ".join(
            part
            for part in (spec.get("description"), spec.get("requestBody", {}).get("description"))
            if part
        ),
        parameters=[
            Field(
                name=p["name"],
                where=p.get("in", ""),
                type=type_text(p.get("schema")),
                required=bool(p.get("required")),
                description=p.get("description", ""),
            )
            for p in spec.get("parameters", [])
        ],
        body=_fields(body_schema or {}) if inline_body else [],
        body_type=type_text(body_schema) if body_schema is not None and not inline_body else None,
        responses=[
            Response(
                status=status,
                description=answer.get("description", ""),
                type=type_text(_json_schema(answer)) if _json_schema(answer) else None,
            )
            for status, answer in sorted(spec.get("responses", {}).items())
        ],
    )


def api_docs(document: dict) -> ApiDocs:
    """The page's contents from an OpenAPI 3 document: every operation in path order (a path's
    methods in the usual order), then every schema by name."""
    operations = [
        _operation(path, method, item[method])
        for path, item in sorted(document.get("paths", {}).items())
        for method in METHODS
        if method in item
    ]
    schemas = [
        Schema(
            name=name,
            description=schema.get("description", ""),
            fields=_fields(schema),
            type=type_text(schema),
        )
        for name, schema in sorted(document.get("components", {}).get("schemas", {}).items())
    ]
    info = document.get("info", {})
    servers = document.get("servers") or [{}]
    return ApiDocs(
        title=info.get("title", "API"),
        version=str(info.get("version", "")),
        description=info.get("description", ""),
        base=servers[0].get("url", ""),
        operations=operations,
        schemas=schemas,
    )
