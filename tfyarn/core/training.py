"""Training progress as its users see it: the live line el_submit and `Job.wait` show,
the plots of the job page and the kept page (metrics over steps, steps/s over time, the
attempts' timeline: inline SVG, drawn here so a live page and a kept one look the same
and need no script or CDN), the series as rows for `Job.metrics()`, and a job's final
metric for the history listing.

Pure functions of the tasks' reports (`StepReport`) and the driver's `Training` record,
which a task's code or a forged kept page may fill with anything: every name is escaped
(HTML) or made printable (the terminal), uneven series are cut to their shortest.
Must not do I/O nor read a clock.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfyarn.core.records import Goodput, StepReport, StepSamples, Training
from tfyarn.core.tfconfig import natural_name

PLOT_TASKS = 8  # tasks drawn in a metric plot (the rest are in `Job.metrics()`)
PLOT_METRICS = 6  # metrics plotted, in name order
RATE_POINTS = 300  # steps/s points drawn per attempt (wider spans when more were kept)
LINE_METRICS = 3  # metrics on the live line
MARKED = 60  # a line of at most this many points shows each as a dot
WIDTH, HEIGHT, PAD = 560, 180, 44
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#17becf")
STATE_COLORS = {"SUCCEEDED": "#2ca02c", "FAILED": "#d62728", "KILLED": "#7f7f7f",
                "RUNNING": "#1f77b4"}


# ---------------------------------------------------------------- the live line


def live_line(reports: Mapping[str, StepReport], attempt: int, attempts: int) -> str | None:
    """One line on the job's training now: the slowest and fastest task's step (of the
    total, when the tasks said it), the slowest's steps/s, the latest metrics (the
    chief's, else the first reporting task's), an ETA at the slowest's rate, and the
    attempt. None before any task reported."""
    if not reports:
        return None
    tasks = sorted(reports, key=natural_name)
    slow = min(tasks, key=lambda t: reports[t].step)  # the first such, in task order
    fast = max(tasks, key=lambda t: reports[t].step)
    total = max((r.total for r in reports.values() if r.total is not None), default=None)
    lo, hi = reports[slow].step, reports[fast].step
    of = f"/{total}" if total is not None else ""
    steps = (f"step {hi}{of}" if lo == hi else
             f"step {lo} ({slow}) - {hi} ({fast}){of}")
    parts = [steps, f"{reports[slow].rate:.1f} steps/s"]
    said = next((reports[t] for t in tasks if t.startswith("chief") and reports[t].metrics),
                next((reports[t] for t in tasks if reports[t].metrics), None))
    if said is not None:
        parts.append(" ".join(f"{_printable(k)} {_num(v)}" for k, v in
                              sorted(said.metrics.items())[:LINE_METRICS]))
    if total is not None and reports[slow].rate > 0 and lo < total:
        parts.append(f"ETA {_duration((total - lo) / reports[slow].rate)}")
    parts.append(f"attempt {attempt + 1}/{attempts}")
    return " · ".join(parts)


def _printable(name: str) -> str:
    """A metric's name (the task's to choose) without control characters: a terminal
    shows it, never acts on it."""
    return "".join(c if c.isprintable() else "?" for c in name)


def _num(v: float) -> str:
    return f"{v:.4g}"


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


# ---------------------------------------------------------------- the series as data


def metric_rows(t: Training) -> list[dict[str, Any]]:
    """Every kept report as a row: task, attempt (0-based), step, time (the task's
    clock, epoch seconds) and each metric it reported."""
    rows: list[dict[str, Any]] = []
    for a, log in zip(t.goodput.attempts, t.logs, strict=False):
        for task in sorted(log.series, key=natural_name):
            s = log.series[task]
            for i, (at, step) in enumerate(zip(s.times, s.steps, strict=False)):
                row: dict[str, Any] = {"task": task, "attempt": a.attempt, "step": step,
                                       "time": at}
                row.update({k: v[i] for k, v in s.metrics.items()
                            if i < len(v) and not math.isnan(v[i])})
                rows.append(row)
    return rows


def final_metrics(t: Training | None) -> str:
    """The last attempt's last reported metrics (the chief's, else the first reporting
    task's), e.g. `loss 0.0312`; empty when none reported any."""
    if t is None or not t.logs:
        return ""
    series = t.logs[-1].series
    tasks = sorted(series, key=lambda k: (not k.startswith("chief"), natural_name(k)))
    for task in tasks:
        last = {k: next((x for x in reversed(v) if not math.isnan(x)), math.nan)
                for k, v in series[task].metrics.items()}
        shown = [f"{k} {_num(v)}" for k, v in sorted(last.items()) if not math.isnan(v)]
        if shown:
            return " ".join(shown[:LINE_METRICS])
    return ""


# ---------------------------------------------------------------- the plots


def plots(t: Training) -> str:
    """The job's plots as HTML (inline SVG, every label escaped): each metric over
    steps, steps/s over time, the attempts' timeline with goodput."""
    parts = ['<section id="training"><h2>training</h2>']
    names = sorted({k for log in t.logs for s in log.series.values() for k in s.metrics})
    for name in names[:PLOT_METRICS]:
        parts.append(_figure(f"plot-metric-{_slug(name)}", f"{name} over steps",
                             _metric_svg(t, name)))
    parts.append(_figure("plot-rate", "steps/s over time (minutes from the job's start)",
                         _rate_svg(t)))
    parts.append(_figure("plot-attempts", _attempts_caption(t.goodput), _timeline_svg(t)))
    parts.append(_attempts_list(t.goodput))
    return "".join(parts) + "</section>"


def _figure(ident: str, caption: str, svg: str) -> str:
    return (f'<figure id="{html.escape(ident)}"><figcaption>{html.escape(caption)}'
            f"</figcaption>{svg}</figure>")


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


Line = tuple[str, str, Sequence[tuple[float, float]], float]  # label, color, points, opacity


def _metric_svg(t: Training, name: str) -> str:
    tasks = sorted({k for log in t.logs for k, s in log.series.items() if name in s.metrics},
                   key=natural_name)[:PLOT_TASKS]
    lines: list[Line] = []
    last = len(t.logs) - 1
    for i, log in enumerate(t.logs):
        for j, task in enumerate(tasks):
            s = log.series.get(task)
            if s is None or name not in s.metrics:
                continue
            pts = [(float(st), v) for st, v in zip(s.steps, s.metrics[name], strict=False)
                   if not math.isnan(v)]
            lines.append((f"{task} (attempt {i + 1})", COLORS[j % len(COLORS)], pts,
                          1.0 if i == last else 0.45))
    legend = [(task, COLORS[j % len(COLORS)]) for j, task in enumerate(tasks)]
    return _chart(lines, legend, "step", name)


def _rates(log: StepSamples, began: float) -> list[tuple[float, float]]:
    """steps/s between kept samples of the highest step, over wider spans when many."""
    pts = list(zip(log.times, log.steps, strict=False))
    stride = max(1, math.ceil(len(pts) / RATE_POINTS))
    pts = [*pts[::stride], *([pts[-1]] if pts and (len(pts) - 1) % stride else [])]
    out = []
    for (t0, s0), (t1, s1) in zip(pts, pts[1:], strict=False):
        if t1 > t0:
            out.append(((t1 - began) / 60, (s1 - s0) / (t1 - t0)))
    return out


def _rate_svg(t: Training) -> str:
    lines: list[Line] = [(f"attempt {a.attempt + 1}", COLORS[i % len(COLORS)],
                          _rates(log, t.began), 1.0)
                         for i, (a, log) in enumerate(zip(t.goodput.attempts, t.logs,
                                                          strict=False))]
    return _chart(lines, [(x[0], x[1]) for x in lines if x[2]], "minutes", "steps/s",
                  y_from_zero=True)


def _chart(lines: Sequence[Line], legend: Sequence[tuple[str, str]], xlabel: str,
           ylabel: str, y_from_zero: bool = False) -> str:
    """A line chart: axes with their ranges, one polyline per line, a legend."""
    pts = [p for _, _, ps, _ in lines for p in ps if math.isfinite(p[1])]
    e = html.escape
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT + 30}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT + 30}" role="img" aria-label="{e(ylabel)} by '
            f'{e(xlabel)}">')
    if not pts:
        return (head + f'<text x="{PAD}" y="{HEIGHT / 2:.0f}" fill="#777">nothing reported '
                "yet</text></svg>")
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    y0 = min(y0, 0.0) if y_from_zero else y0
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

    def xy(p: tuple[float, float]) -> str:
        x = PAD + (p[0] - x0) / (x1 - x0) * (WIDTH - PAD - 10)
        y = HEIGHT - 20 - (p[1] - y0) / (y1 - y0) * (HEIGHT - 30)
        return f"{x:.1f},{y:.1f}"

    body = [f'<line x1="{PAD}" y1="{HEIGHT - 20}" x2="{WIDTH - 10}" y2="{HEIGHT - 20}" '
            f'stroke="#999"/><line x1="{PAD}" y1="10" x2="{PAD}" y2="{HEIGHT - 20}" '
            'stroke="#999"/>',
            _label(PAD - 4, 14, _num(y1), "end"), _label(PAD - 4, HEIGHT - 20, _num(y0), "end"),
            _label(PAD, HEIGHT - 6, _num(x0), "start"),
            _label(WIDTH - 10, HEIGHT - 6, _num(x1), "end"),
            _label((WIDTH + PAD) / 2, HEIGHT - 6, xlabel, "middle")]
    for label, color, ps, opacity in lines:
        good = [p for p in ps if math.isfinite(p[1])]
        if good:
            body.append(f'<polyline class="series" fill="none" stroke="{color}" '
                        f'stroke-width="1.5" stroke-opacity="{opacity}" '
                        f'points="{" ".join(xy(p) for p in good)}"><title>{e(label)}</title>'
                        "</polyline>")
        if 0 < len(good) <= MARKED:  # few points (or one): each seen as a dot
            body.extend(f'<circle cx="{xy(p).split(",")[0]}" cy="{xy(p).split(",")[1]}" r="2.5" '
                        f'fill="{color}" fill-opacity="{opacity}"/>' for p in good)
    x = PAD
    for label, color in legend:
        body.append(f'<rect x="{x}" y="{HEIGHT + 10}" width="10" height="10" fill="{color}"/>'
                    + _label(x + 14, HEIGHT + 19, label, "start"))
        x += 24 + 7 * len(label)
    return head + "".join(body) + "</svg>"


def _label(x: float, y: float, text: str, anchor: str) -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="11" text-anchor="{anchor}" '
            f'fill="#444">{html.escape(text)}</text>')


def _timeline_svg(t: Training) -> str:
    """One bar per attempt over the job's wall time, colored by how it ended; the time
    it lost (work done again after it) marked at its end."""
    attempts = t.goodput.attempts
    if not attempts:
        return _chart([], [], "minutes", "attempts")
    x0 = min([t.began, *(a.start for a in attempts)])
    x1 = max(a.end for a in attempts)
    span = max(x1 - x0, 1.0)
    row = 22
    height = row * len(attempts) + 30

    def x(at: float) -> float:
        return PAD + (at - x0) / span * (WIDTH - PAD - 10)

    e = html.escape
    body = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="attempts over time">']
    for i, a in enumerate(attempts):
        y = 6 + i * row
        color = STATE_COLORS.get(a.state, "#7f7f7f")
        words = f"attempt {a.attempt + 1}: {a.state}" + (f" ({a.cause})" if a.cause else "")
        body.append(_label(PAD - 4, y + 13, str(a.attempt + 1), "end"))
        body.append(f'<rect class="attempt {e(a.state)}" x="{x(a.start):.1f}" y="{y}" '
                    f'width="{max(x(a.end) - x(a.start), 1.0):.1f}" height="{row - 6}" '
                    f'fill="{color}" fill-opacity="0.75"><title>{e(words)}</title></rect>')
        if a.lost_s:
            lost = max(a.start, a.end - a.lost_s)
            body.append(f'<rect class="lost" x="{x(lost):.1f}" y="{y}" '
                        f'width="{max(x(a.end) - x(lost), 1.0):.1f}" height="{row - 6}" '
                        f'fill="none" stroke="#000" stroke-dasharray="3,2"><title>lost '
                        f"{_duration(a.lost_s)}</title></rect>")
    base = row * len(attempts) + 10
    body.append(_label(PAD, base + 12, "0", "start"))
    body.append(_label(WIDTH - 10, base + 12, f"{span / 60:.3g} min", "end"))
    return "".join(body) + "</svg>"


def _attempts_caption(g: Goodput) -> str:
    ratio = f"goodput {g.ratio:.0%}" if g.ratio is not None else "no steps reported"
    return f"attempts over time ({ratio}; dashed: time lost to work done again)"


def _attempts_list(g: Goodput) -> str:
    """The timeline in words, for a reader without SVG."""
    e = html.escape
    items: Iterable[str] = (
        f"<li>attempt {a.attempt + 1}: {e(a.state)}"
        + (f" ({e(a.cause)})" if a.cause else "") + f", {_duration(a.end - a.start)}"
        + (f", steps {a.first_step}-{a.last_step}" if a.first_step is not None else "")
        + (f", lost {_duration(a.lost_s)}" if a.lost_s else "") + "</li>"
        for a in g.attempts)
    return '<ol id="attempts">' + "".join(items) + "</ol>"
