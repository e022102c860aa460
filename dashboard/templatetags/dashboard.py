"""Presentation helpers for the console templates. Everything they output is escaped."""

import json
import uuid
from datetime import UTC, datetime, timedelta

from django import template
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from jobs.actions import due_later as job_due_later
from jobs.states import AttemptOutcome, DeadLetterReason, JobState

from ..buttons import job_buttons, state_buttons
from ..health import no_worker_alert
from ..permissions import can_operate

register = template.Library()

STATE_LABELS = dict(JobState.choices)
OUTCOME_LABELS = dict(AttemptOutcome.choices)
REASON_LABELS = dict(DeadLetterReason.choices)


def _span(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 1:
        return "<1 s"
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        hours, rest = divmod(int(seconds), 3600)
        return f"{hours} h {rest // 60} min" if hours < 10 and rest >= 60 else f"{hours} h"
    days = int(seconds // 86400)
    return f"{days} d"


@register.simple_tag
def when(moment: datetime | None, empty: str = "—", ahead: bool = False):
    """A relative time with the absolute UTC time beside it: "3 min ago · 02:31:07 UTC".

    The clock time alone for today (UTC), with the date for any other day; the full
    timestamp is the title too. `ahead` marks a moment awaited (a next fire time): once it
    has passed it reads "due now", as the page's countdown says between refreshes.
    """
    if moment is None:
        return empty
    now = timezone.now()
    delta = (moment - now).total_seconds()
    if ahead:
        relative = f"in {_span(delta)}" if delta >= 1 else "due now"
    elif abs(delta) < 1:
        relative = "just now"
    else:
        relative = f"in {_span(delta)}" if delta > 0 else f"{_span(delta)} ago"
    utc = moment.astimezone(UTC)
    full = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    today = utc.date() == now.astimezone(UTC).date()
    clock = utc.strftime("%H:%M:%S" if today else "%Y-%m-%d %H:%M")
    # Only the relative part can hold a character to escape ("<1 s"); the rest is digits and
    # punctuation made here. A list shows two of these per row: format_html was most of it.
    return mark_safe(
        f'<time datetime="{moment.isoformat()}" title="{full}">{escape(relative)}'
        '<span class="abs-time">'
        f'<span class="abs-sep"> · </span>{clock} UTC</span></time>'
    )


@register.filter
def age(delta: timedelta | None):
    """A duration given as a timedelta, in the largest sensible units."""
    if delta is None:
        return "—"
    return _span(delta.total_seconds())


@register.filter
def duration(delta: timedelta | None):
    """An attempt's run time, precise for short runs."""
    if delta is None:
        return "—"
    seconds = delta.total_seconds()
    if seconds < 0.0005:
        # "0 ms" would read as "did not run".
        return "< 1 ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    return _span(seconds)


@register.simple_tag
def state_badge(state: str):
    return format_html(
        '<span class="badge badge-{}">{}</span>', state, STATE_LABELS.get(state, state)
    )


@register.simple_tag
def outcome_badge(outcome: str):
    label = OUTCOME_LABELS.get(outcome, outcome)
    return format_html('<span class="badge badge-outcome-{}">{}</span>', outcome, label)


@register.filter
def reason_label(reason: str):
    return REASON_LABELS.get(reason, reason)


@register.filter
def number(value) -> str:
    return f"{value:,}"


@register.filter
def percent(fraction) -> str:
    """A share as a percentage: "12.5 %"; "—" when there is none."""
    if fraction is None:
        return "—"
    return f"{fraction * 100:.1f} %".replace(".0 %", " %")


@register.filter
def short_id(value) -> str:
    """The first 8 hex digits, which the job search also takes."""
    return str(value)[:8]


@register.filter
def pretty_json(value) -> str:
    """JSON for reading: on one line when short, indented otherwise. The template escapes it."""
    compact = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    if len(compact) <= 72:
        return compact
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@register.filter
def module_of(task_path: str) -> str:
    return task_path.rpartition(".")[0]


@register.filter
def name_of(task_path: str) -> str:
    return task_path.rpartition(".")[2]


@register.simple_tag
def action_token() -> str:
    """A fresh token for a Rerun form, so submitting that same form twice reruns once."""
    return uuid.uuid4().hex


@register.simple_tag
def due_later(job):
    """The later run_after a pending or retrying job waits for, or None."""
    return job_due_later(job)


# A UUID no job has: reversed once per request, it marks where each job's id goes in an
# action's URL. Lists render dozens of rows with several forms each; a {% url %} per form was
# a fifth of the dead-letters page's time.
_ID_MARK = "00000000-0000-0000-0000-00000000feed"


def _csrf_field(context) -> str:
    """The hidden CSRF field of a form built here, as {% csrf_token %} writes it."""
    token = context.get("csrf_token")
    if not token or token == "NOTPROVIDED":
        return ""
    return format_html('<input type="hidden" name="csrfmiddlewaretoken" value="{}">', token)


def _action_url(request, url_name, job_id) -> str:
    urls = request.__dict__.setdefault("_job_action_urls", {})
    if url_name not in urls:
        urls[url_name] = reverse(url_name, args=[_ID_MARK])
    return urls[url_name].replace(_ID_MARK, str(job_id))


@register.simple_tag(takes_context=True)
def job_actions(context, job, target, *only):
    """The action buttons `job` offers the user, or only those whose action is in `only`.

    Each is a plain POST form that works without JavaScript; htmx posts it instead and swaps
    `target`, the fragment of the page it sits on, which then shows the message. A button with
    a question posts confirm=ask: dashboard.js asks in a dialog and posts confirm=yes, and
    without script the server answers a page that asks.
    """
    buttons = job_buttons(job, context["user"])
    if only:
        buttons = [b for b in buttons if b.action in only]
    if not buttons:
        return ""
    request = context["request"]
    common = format_html(
        '{}<input type="hidden" name="next" value="{}">',
        _csrf_field(context),
        request.get_full_path(),
    )
    forms = []
    for button in buttons:
        url = _action_url(request, button.url_name, job.id)
        extra = ""
        if button.action == "rerun":
            extra += format_html('<input type="hidden" name="token" value="{}">', action_token())
        if button.confirm:
            extra += '<input type="hidden" name="confirm" value="ask">'
        forms.append(
            format_html(
                '\n  <form method="post" action="{url}" hx-post="{url}" hx-target="#{target}"'
                ' hx-swap="outerHTML" hx-sync="#{target}:replace" hx-disabled-elt="find button"'
                ' data-action="{action}"{confirm}>\n    {common}{extra}\n'
                '    <button type="submit" class="button button-{action}">{label}</button>\n'
                "  </form>",
                url=url,
                target=target,
                action=button.action,
                confirm=format_html(
                    ' data-confirm="{}" data-confirm-label="{}"',
                    button.confirm,
                    button.confirm_label,
                )
                if button.confirm
                else "",
                common=common,
                extra=mark_safe(extra),
                label=button.label,
            )
        )
    return format_html('<div class="actions">{}\n</div>', mark_safe("".join(forms)))


@register.simple_tag(takes_context=True)
def job_url(context, job_id) -> str:
    """The address of a job's page, as {% url 'dashboard:job' job_id %} gives it, reversed once
    per request."""
    return _action_url(context["request"], "dashboard:job", job_id)


@register.simple_tag(takes_context=True)
def row_actions(context, job, *only):
    """The action buttons of one row of a list, or only those whose action is in `only`.

    They belong to the list's one action form (`{% row_actions_form %}`), which carries the
    CSRF token, the page to come back to and a Rerun token once for every row: each button
    posts that form to its own action's URL for this job (`formaction` without script,
    `hx-post` with htmx). A button with a question sends confirm=ask, as `job_actions` does.
    The HTML of each set of buttons is built once per request and copied for every row.
    """
    request = context["request"]
    built = request.__dict__.setdefault("_row_actions_html", {})
    # Asked once per request, not once per row.
    if "operate" not in built:
        built["operate"] = can_operate(context["user"])
    buttons = state_buttons(job) if built["operate"] else []
    if only:
        buttons = [b for b in buttons if b.action in only]
    if not buttons:
        return ""
    key = tuple(b.action for b in buttons)
    if key not in built:
        built[key] = _row_buttons(request, buttons)
    # A job id is hex digits and dashes: nothing to escape.
    return mark_safe(built[key].replace(_ID_MARK, str(job.id)))


def _row_buttons(request, buttons) -> str:
    html = []
    for button in buttons:
        url = _action_url(request, button.url_name, _ID_MARK)
        confirm = (
            format_html(
                ' name="confirm" value="ask" data-confirm="{}" data-confirm-label="{}"',
                button.confirm,
                button.confirm_label,
            )
            if button.confirm
            else ""
        )
        html.append(
            format_html(
                '<button type="submit" formaction="{url}" hx-post="{url}" hx-disabled-elt="this"'
                ' class="button button-{action}" data-action="{action}"{confirm}>{label}</button>',
                url=url,
                action=button.action,
                confirm=confirm,
                label=button.label,
            )
        )
    return format_html('<div class="actions">{}</div>', mark_safe("".join(html)))


@register.tag("row_actions_form")
def row_actions_form(parser, token):
    """`{% row_actions_form "target" %}rows{% end_row_actions_form %}`: the one form a list's
    row buttons (`{% row_actions %}`) post, around its table. htmx swaps `target`, the fragment
    of the page it sits on, which then shows the message. Only the table when the user may not
    act on jobs."""
    bits = token.split_contents()
    if len(bits) != 2:
        raise template.TemplateSyntaxError('usage: {% row_actions_form "target" %}')
    rows = parser.parse(("end_row_actions_form",))
    parser.delete_first_token()
    return RowActionsFormNode(parser.compile_filter(bits[1]), rows)


class RowActionsFormNode(template.Node):
    def __init__(self, target, rows):
        self.target, self.rows = target, rows

    def render(self, context):
        rows = self.rows.render(context)
        if not can_operate(context["user"]):
            return rows
        return format_html(
            '<form class="row-actions" method="post" hx-target="#{target}" hx-swap="outerHTML"'
            ' hx-sync="#{target}:replace">{csrf}<input type="hidden" name="next" value="{next}">'
            '<input type="hidden" name="token" value="{token}">\n{rows}</form>',
            target=self.target.resolve(context),
            csrf=_csrf_field(context),
            next=context["request"].get_full_path(),
            token=action_token(),
            rows=mark_safe(rows),
        )


@register.tag("page_head")
def page_head(parser, token):
    """`{% page_head "Title" [live] %}note{% end_page_head %}`: a page's title and its note;
    `live` marks a page that refreshes itself."""
    bits = token.split_contents()
    if len(bits) not in (2, 3) or bits[2:] not in ([], ["live"]):
        raise template.TemplateSyntaxError('usage: {% page_head "Title" [live] %}')
    note = parser.parse(("end_page_head",))
    parser.delete_first_token()
    return PageHeadNode(parser.compile_filter(bits[1]), note, live=len(bits) == 3)


class PageHeadNode(template.Node):
    def __init__(self, title, note, *, live):
        self.title, self.note, self.live = title, note, live

    def render(self, context):
        # The note is rendered (and escaped) by the page's own template.
        note = mark_safe(self.note.render(context).strip())
        values = {"title": self.title.resolve(context), "note": note, "live": self.live}
        return render_to_string("dashboard/includes/page_head.html", values)


@register.inclusion_tag("dashboard/includes/worker_banner.html")
def worker_banner():
    """The warning shown on every page while due jobs wait and no worker is alive."""
    return {"alert": no_worker_alert()}


@register.filter
def code_spans(text: str):
    """Text with its `backticked` words set as code (OpenAPI descriptions use them)."""
    parts = escape(text).split("`")
    if len(parts) % 2 == 0:
        # An unmatched backtick: leave the text as written.
        return escape(text)
    return mark_safe(
        "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))
    )
