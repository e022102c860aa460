"""The geometry of the overview's attempts-per-minute chart, drawn by the template as SVG.

Computed here so the template only places rectangles and labels; drawn server-side so the page
needs no script and holds under a strict Content-Security-Policy.
"""

import math
from dataclasses import dataclass

WIDTH = 720
HEIGHT = 200
LEFT = 44  # room for the y-axis labels
BOTTOM = 22  # room for the time labels
TOP = 8
GAP = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Bar:
    x: float
    width: float
    succeeded_y: float
    succeeded_height: float
    failed_y: float
    failed_height: float
    title: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Tick:
    # A y position for a value line or an x position for a time label.
    position: float
    label: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Chart:
    width: int
    height: int
    left: int
    baseline: float
    bars: list[Bar]
    value_ticks: list[Tick]
    time_ticks: list[Tick]
    total_succeeded: int
    total_failed: int
    summary: str


# Steps of an axis top, times a power of ten: close enough that the tallest bar fills most of
# the height (a peak of 57 gets 60, not 100), each even so the middle line is a whole number.
AXIS_STEPS = (1, 1.2, 1.6, 2, 3, 4, 5, 6, 8)


def nice_ceiling(value: int) -> int:
    """The smallest even AXIS_STEPS x 10^n that is at least `value` (and at least 4)."""
    value = max(value, 4)
    magnitude = 10 ** math.floor(math.log10(value))
    for m in (magnitude, magnitude * 10):
        for step in AXIS_STEPS:
            top = round(step * m)
            if top >= value and top % 2 == 0:
                return top
    return 10 * magnitude  # pragma: no cover


def attempts_chart(minutes) -> Chart:
    """Stacked bars, succeeded below failed, one per minute, from `queries.attempts_per_minute`."""
    top = nice_ceiling(max((m.succeeded + m.failed for m in minutes), default=0))
    plot_height = HEIGHT - TOP - BOTTOM
    baseline = HEIGHT - BOTTOM
    slot = (WIDTH - LEFT) / max(len(minutes), 1)
    scale = plot_height / top
    bars = []
    for i, minute in enumerate(minutes):
        ok_height = minute.succeeded * scale
        failed_height = minute.failed * scale
        bars.append(
            Bar(
                x=round(LEFT + i * slot + GAP / 2, 2),
                width=round(max(slot - GAP, 1), 2),
                succeeded_y=round(baseline - ok_height, 2),
                succeeded_height=round(ok_height, 2),
                failed_y=round(baseline - ok_height - failed_height, 2),
                failed_height=round(failed_height, 2),
                title=(
                    f"{minute.at:%H:%M} UTC: {minute.succeeded:,} succeeded, "
                    f"{minute.failed:,} failed"
                ),
            )
        )
    value_ticks = [
        Tick(position=round(baseline - v * scale, 2), label=f"{v:,}") for v in (0, top // 2, top)
    ]
    time_ticks = [
        Tick(position=round(LEFT + i * slot, 2), label=f"{minute.at:%H:%M}")
        for i, minute in enumerate(minutes)
        if i % 15 == 0
    ]
    total_ok = sum(m.succeeded for m in minutes)
    total_failed = sum(m.failed for m in minutes)
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        left=LEFT,
        baseline=baseline,
        bars=bars,
        value_ticks=value_ticks,
        time_ticks=time_ticks,
        total_succeeded=total_ok,
        total_failed=total_failed,
        summary=(
            f"Attempts per minute over the last hour: {total_ok:,} succeeded, "
            f"{total_failed:,} failed."
        ),
    )
