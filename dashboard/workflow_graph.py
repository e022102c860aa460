"""A workflow's graph drawn on the server: boxes in layers (left to right) and curved edges, as
the coordinates an SVG template draws; past GRAPH_LIMIT nodes, each layer's counts per state."""

from dataclasses import dataclass

from jobs.states import JobState

# Up to this many nodes the page draws every node; past it, each layer's counts.
GRAPH_LIMIT = 50
BOX_W, BOX_H = 180, 36
GAP_X, GAP_Y = 56, 10
MARGIN = 12
LABEL_CHARS = 24


@dataclass(frozen=True, slots=True)
class Box:
    job: object
    x: int
    y: int
    label: str

    @property
    def text_x(self) -> int:
        return self.x + 10


@dataclass(frozen=True, slots=True)
class Drawing:
    boxes: list
    edges: list  # SVG path data, one per edge
    width: int
    height: int
    box_w: int = BOX_W
    box_h: int = BOX_H


@dataclass(frozen=True, slots=True)
class LayerCounts:
    number: int
    total: int
    counts: list  # [(state, n)] in the lifecycle's order, only states present


def _label(job) -> str:
    name = job.node_name or job.task_path.rsplit(".", 1)[-1]
    return name if len(name) <= LABEL_CHARS else name[: LABEL_CHARS - 1] + "…"


def draw(graph) -> Drawing:
    at = {}
    boxes = []
    for column, layer in enumerate(graph.layers):
        for row, job in enumerate(layer):
            x = MARGIN + column * (BOX_W + GAP_X)
            y = MARGIN + row * (BOX_H + GAP_Y)
            at[job.id] = (x, y)
            boxes.append(Box(job, x, y, _label(job)))
    edges = []
    for job in graph.nodes:
        x2, y2 = at[job.id]
        for upstream in job.after:
            if upstream not in at:
                continue
            x1, y1 = at[upstream]
            sx, sy, ex, ey = x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2
            bend = GAP_X // 2
            edges.append(f"M{sx},{sy} C{sx + bend},{sy} {ex - bend},{ey} {ex},{ey}")
    tallest = max((len(layer) for layer in graph.layers), default=0)
    width = 2 * MARGIN + len(graph.layers) * (BOX_W + GAP_X) - GAP_X
    height = 2 * MARGIN + tallest * (BOX_H + GAP_Y) - GAP_Y
    return Drawing(boxes=boxes, edges=edges, width=max(width, 0), height=max(height, 0))


def layer_counts(graph) -> list[LayerCounts]:
    result = []
    for number, layer in enumerate(graph.layers):
        tally: dict[str, int] = {}
        for job in layer:
            tally[job.state] = tally.get(job.state, 0) + 1
        counts = [(s.value, tally[s.value]) for s in JobState if s.value in tally]
        result.append(LayerCounts(number=number, total=len(layer), counts=counts))
    return result
