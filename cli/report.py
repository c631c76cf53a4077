"""``gpuyield simulate --report DIR``: the comparison as four PNG plots and one HTML page.

Same scenario, same results, same bytes: the figures are drawn with
matplotlib's Agg renderer at a fixed size and resolution, from matplotlib's
own default style (a user's ``matplotlibrc`` changes nothing), with fixed
colours and without the ``Software`` stamp in the PNGs; the page carries no
timestamp. The page is self-contained: inline CSS, the PNGs as ``data:``
URIs, no link to anything outside it.

matplotlib is imported inside ``write_report`` only, so the commands that
draw nothing (``gpuyield plan``) do not pay for it.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuyield.agents.simulator.targets import BASELINE, TargetCheck, check_targets
from gpuyield.schemas.scenario import Scenario
from gpuyield.schemas.simulation import PolicyResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

METRIC_ROWS: tuple[tuple[str, str, str], ...] = (
    ("sla_attainment", "SLA attainment (production)", "{:.2%}"),
    ("lost_gpu_hours_per_day", "lost GPU-hours / day", "{:.1f}"),
    ("dangling_gangs_per_week", "dangling gangs / week", "{:.1f}"),
    ("gpu_utilization", "GPU utilization (useful)", "{:.1%}"),
    ("evictions", "evictions", "{}"),
    ("livelock_incidents", "livelock incidents", "{}"),
    ("production_wait_p50_s", "production wait p50 (s)", "{:.0f}"),
    ("production_wait_p99_s", "production wait p99 (s)", "{:.0f}"),
    ("jobs_completed", "jobs completed", "{}"),
    ("jobs_failed", "jobs Failed (retries spent)", "{}"),
)
"""The comparison table's rows: metric field, label, format (the terminal table too)."""


def duration(seconds: float | None) -> str:
    """Seconds as a person reads a wait: 45 s, 12 min, 3.4 h, 2.1 d (None: -)."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def queue_rows(results: dict[str, PolicyResult]) -> list[tuple[str, ...]]:
    """Per queue: jobs completed (of those submitted), waits and completion times.

    Rows are (queue, figure, one value per policy), queues in the scenario's
    order; the terminal table and the page show the same rows.
    """
    queues: list[str] = []
    for result in results.values():
        queues += [q for q in result.metrics.queues if q not in queues]
    rows: list[tuple[str, ...]] = []
    for queue in queues:
        per = [r.metrics.queues.get(queue) for r in results.values()]
        rows.append(
            (
                queue,
                "completed (submitted)",
                *(
                    "-" if q is None else f"{q.jobs_completed:,} ({q.jobs_submitted:,})"
                    for q in per
                ),
            )
        )
        rows.append(
            (
                "",
                "wait p50 / p99",
                *(
                    "-" if q is None else f"{duration(q.wait_p50_s)} / {duration(q.wait_p99_s)}"
                    for q in per
                ),
            )
        )
        rows.append(
            (
                "",
                "done after p50 / p99",
                *(
                    "-"
                    if q is None
                    else f"{duration(q.completion_p50_s)} / {duration(q.completion_p99_s)}"
                    for q in per
                ),
            )
        )
    return rows


def target_rows(checks: Sequence[TargetCheck]) -> list[tuple[str, ...]]:
    """One row per policy and target: the rule, the two figures, met or missed."""
    return [
        (
            c.policy,
            c.rule,
            _figure(c.target, c.value),
            _figure(c.target, c.baseline),
            "met" if c.met else "MISSED",
        )
        for c in checks
    ]


def _figure(target: str, value: float) -> str:
    if target == "sla_attainment":
        return f"{value:.2%}"
    if target == "production_wait_p99_s":
        return duration(value)
    if target == "jobs_completed":
        return f"{value:,.0f}"
    return f"{value:.1f}"


DPI = 100
WIDTH_IN = 10.0
HEIGHT_IN = 4.5
QUEUE_PANEL_IN = 2.6
"""Every figure is WIDTH_IN x HEIGHT_IN inches at DPI (1000 x 450 pixels), except
``queues.png``: one QUEUE_PANEL_IN-inch panel per policy, plus 0.8 inch."""

POLICY_COLORS = {
    "volcano-native": "#d62728",
    "volcano-gang": "#ff7f0e",
    "gpuyield": "#1f77b4",
}
_OTHER_COLORS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
QUEUE_COLORS = ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd", "#8c8c8c")

_RC: dict[Any, Any] = {  # Any: matplotlib types the keys as a Literal of every rcParam
    "font.family": "DejaVu Sans",  # shipped inside matplotlib: the same glyphs everywhere
    "font.size": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
}

CAPTIONS = {
    "utilization.png": (
        "GPU utilization: useful GPUs (solid) are those held by a running job that is making "
        "progress, used GPUs (dashed) are all GPUs bound to a pod, including those draining, "
        "checkpointing or stuck in a broken gang."
    ),
    "queues.png": (
        "Queue use: the GPUs bound to each queue's pods at every hourly sample, stacked, "
        "one panel per policy; the dotted line is the cluster's capacity."
    ),
    "evictions.png": (
        "Evictions: victims evicted in each hour, counted once per job or pod group per "
        "scheduling round."
    ),
    "lost-work.png": (
        "Lost work: cumulative GPU-hours of computation rolled back to the last checkpoint "
        "because of preemption (a kill, or a gang broken by one); a graceful yield that "
        "checkpoints first loses none."
    ),
}


def write_report(out: Path, scenario: Scenario, results: dict[str, PolicyResult]) -> list[Path]:
    """Write the four plots and ``index.html`` into ``out`` (created); return their paths.

    Raises ``OSError`` when the directory or a file cannot be written.
    """
    import matplotlib as mpl
    import matplotlib.style

    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, bytes] = {}
    with matplotlib.style.context("default"), mpl.rc_context(_RC):
        for name, draw in (
            ("utilization.png", _utilization),
            ("queues.png", _queues),
            ("evictions.png", _evictions),
            ("lost-work.png", _lost_work),
        ):
            figures[name] = _render(draw, scenario, results)
    written: list[Path] = []
    for name, data in figures.items():
        path = out / name
        path.write_bytes(data)
        written.append(path)
    page = out / "index.html"
    page.write_text(_page(scenario, results, figures), encoding="utf-8", newline="\n")
    written.append(page)
    return written


# -- figures -------------------------------------------------------------------------------


def _render(
    draw: Callable[[Figure, Scenario, dict[str, PolicyResult]], None],
    scenario: Scenario,
    results: dict[str, PolicyResult],
) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    draw(fig, scenario, results)
    buffer = io.BytesIO()
    # No "Software" stamp; Agg's PNGs carry no date, so nothing else varies.
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _color(policy: str, index: int) -> str:
    return POLICY_COLORS.get(policy, _OTHER_COLORS[index % len(_OTHER_COLORS)])


def _time_axis(scenario: Scenario) -> tuple[float, str]:
    """Hours for runs of up to two days, days beyond: (divisor of t_h, axis label)."""
    return (24.0, "time (days)") if scenario.days > 2 else (1.0, "time (hours)")


def _times(result: PolicyResult, divisor: float) -> list[float]:
    return [t / divisor for t in result.series.t_h]


def _finish_time_axis(ax: Axes, scenario: Scenario) -> None:
    divisor, label = _time_axis(scenario)
    ax.set_xlabel(label)
    ax.set_xlim(0, scenario.days * 24.0 / divisor)


def _capacity_line(ax: Axes, scenario: Scenario, label: str | None) -> None:
    total = scenario.nodes * scenario.gpus_per_node
    ax.axhline(total, color="#555555", linestyle=":", linewidth=1.2, label=label)
    ax.set_ylim(0, total * 1.08)


def _utilization(fig: Figure, scenario: Scenario, results: dict[str, PolicyResult]) -> None:
    ax = fig.add_subplot()
    divisor, _ = _time_axis(scenario)
    for index, (name, result) in enumerate(results.items()):
        color = _color(name, index)
        t = _times(result, divisor)
        ax.plot(
            t,
            result.series.useful_gpus,
            color=color,
            linewidth=1.6,
            alpha=0.9,
            label=f"{name}: useful",
        )
        ax.plot(
            t,
            result.series.used_gpus,
            color=color,
            linewidth=1.0,
            linestyle="--",
            alpha=0.8,
            label=f"{name}: used",
        )
    _capacity_line(ax, scenario, "cluster GPUs")
    ax.set_title("GPUs doing useful work (solid) and bound to pods (dashed)")
    ax.set_ylabel("GPUs")
    _finish_time_axis(ax, scenario)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)


def _queues(fig: Figure, scenario: Scenario, results: dict[str, PolicyResult]) -> None:
    panels = max(1, len(results))
    fig.set_size_inches(WIDTH_IN, QUEUE_PANEL_IN * panels + 0.8)
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    divisor, _ = _time_axis(scenario)
    queues = _queue_names(scenario, results)
    colors = {q: QUEUE_COLORS[i % len(QUEUE_COLORS)] for i, q in enumerate(queues)}
    for ax, (name, result) in zip(axes, results.items(), strict=False):
        t = _times(result, divisor)
        present = [q for q in queues if q in result.series.queue_gpus]
        if present and t:
            ax.stackplot(
                t,
                *(result.series.queue_gpus[q] for q in present),
                labels=present,
                colors=[colors[q] for q in present],
                alpha=0.85,
                linewidth=0,
            )
        _capacity_line(ax, scenario, None)
        ax.set_title(name, loc="left", fontsize=10, fontweight="bold")
        ax.set_ylabel("GPUs")
        _finish_time_axis(ax, scenario)
    for ax in axes[:-1]:
        ax.set_xlabel("")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles), fontsize=9)
    fig.suptitle("GPUs in use per queue (stacked)")


def _queue_names(scenario: Scenario, results: dict[str, PolicyResult]) -> list[str]:
    """The scenario's queues in their order, then any other sampled queue, sorted."""
    names = [q.name for q in scenario.queues]
    extra = sorted({q for r in results.values() for q in r.series.queue_gpus} - set(names))
    return names + extra


def _evictions(fig: Figure, scenario: Scenario, results: dict[str, PolicyResult]) -> None:
    from matplotlib.ticker import FuncFormatter

    ax = fig.add_subplot()
    divisor, _ = _time_axis(scenario)
    for index, (name, result) in enumerate(results.items()):
        total = sum(result.series.evictions)
        ax.step(
            _times(result, divisor),
            result.series.evictions,
            where="pre",  # the sample at t counts the hour that ends at t
            color=_color(name, index),
            linewidth=1.3,
            alpha=0.9,
            clip_on=False,
            label=f"{name} ({total:,} in all)",
        )
    # Storms of hundreds an hour and single evictions on one axis: linear up to 1, log above.
    ax.set_yscale("symlog", linthresh=1.0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.set_ylim(bottom=0)
    ax.set_title("Evictions per hour")
    ax.set_ylabel("evictions in the hour (log scale)")
    _finish_time_axis(ax, scenario)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)


def _lost_work(fig: Figure, scenario: Scenario, results: dict[str, PolicyResult]) -> None:
    ax = fig.add_subplot()
    divisor, _ = _time_axis(scenario)
    for index, (name, result) in enumerate(results.items()):
        lost = result.series.lost_gpu_hours
        final = lost[-1] if lost else 0.0
        ax.plot(
            _times(result, divisor),
            lost,
            color=_color(name, index),
            linewidth=1.6,
            clip_on=False,
            label=f"{name} ({final:,.1f} GPU-h)",
        )
    ax.set_ylim(bottom=0)
    ax.set_title("Work lost to preemption (cumulative)")
    ax.set_ylabel("GPU-hours lost")
    _finish_time_axis(ax, scenario)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)


# -- page ----------------------------------------------------------------------------------

_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       margin: 2rem auto; max-width: 1080px; padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
p.lead { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .6rem 0; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .3rem .7rem; text-align: left; }
th { background: #f5f5f7; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1.2rem 0 2rem; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #444; font-size: .92rem; margin-top: .4rem; }
code { background: #f5f5f7; padding: 0 .25rem; border-radius: 3px; }
""".strip()

# Sets data-images-loaded="<decoded>/<all>" on <body> once the page has loaded:
# a headless browser's DOM dump shows whether every embedded plot decoded.
_SCRIPT = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var decoded = images.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  document.body.dataset.imagesLoaded = decoded.length + "/" + images.length;
});
""".strip()


def _page(scenario: Scenario, results: dict[str, PolicyResult], figures: dict[str, bytes]) -> str:
    e = html.escape
    total = scenario.nodes * scenario.gpus_per_node
    title = (
        f"gpuyield simulate: {scenario.nodes} nodes x {scenario.gpus_per_node} GPUs, "
        f"{_days(scenario.days)}, seed {scenario.seed}"
    )
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',
        f"<title>{e(title)}</title>",
        f"<style>\n{_CSS}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{e(title)}</h1>",
        '<p class="lead">The same workload under each preemption policy: '
        f"{e(', '.join(results))}. Deterministic: the same scenario and seed give "
        "these numbers and this page byte for byte.</p>",
        "<h2>Scenario</h2>",
        _summary_table(scenario, total),
        _queue_table(scenario),
        _workload_table(scenario),
        "<h2>Metrics</h2>",
        _metrics_table(results),
        "<h2>Per queue</h2>",
        _table(("queue", "figure", *results), queue_rows(results), numeric_from=2),
        *_targets_section(results),
        "<h2>Over time</h2>",
    ]
    for name, data in figures.items():
        uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        alt = name.removesuffix(".png").replace("-", " ")
        parts.append(
            f'<figure id="{e(alt.replace(" ", "-"))}"><img src="{uri}" alt="{e(alt)}">'
            f"<figcaption>{e(CAPTIONS[name])}</figcaption></figure>"
        )
    parts += [f"<script>\n{_SCRIPT}\n</script>", "</body>", "</html>", ""]
    return "\n".join(parts)


def _targets_section(results: dict[str, PolicyResult]) -> list[str]:
    checks = check_targets({n: r.metrics for n, r in results.items()})
    if not checks:
        return []
    return [
        f"<h2>Against {html.escape(BASELINE)}</h2>",
        "<p>Production's SLA first, then the least lost work, and neither bought with "
        "production waits or with the jobs the pool completes.</p>",
        _table(
            ("policy", "target", "figure", BASELINE, "verdict"),
            target_rows(checks),
            numeric_from=2,
        ),
    ]


def _days(days: float) -> str:
    return f"{days:g} day" if days == 1 else f"{days:g} days"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric_from: int) -> str:
    def cell(tag: str, i: int, text: str) -> str:
        attr = ' class="num"' if i >= numeric_from else ""
        return f"<{tag}{attr}>{html.escape(text)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(headers))
    body = "\n".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows
    )
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


def _summary_table(scenario: Scenario, total: int) -> str:
    rows = [
        ("cluster", f"{scenario.nodes} nodes x {scenario.gpus_per_node} GPUs = {total} GPUs"),
        ("simulated time", f"{_days(scenario.days)} ({scenario.days * 24:g} hours)"),
        ("warm-up before it, not measured", f"{scenario.warmup_h:g} hours"),
        ("seed", str(scenario.seed)),
        ("scheduling period", f"{scenario.cycle_s:g} s"),
        ("checkpoint on graceful yield", f"{scenario.checkpoint_save_s:g} s"),
        ("kill grace period", f"{scenario.kill_grace_s:g} s"),
        ("RestartJob retry budget", str(scenario.max_retry)),
        ("share of jobs with RestartJob", f"{scenario.restart_job_share:.0%}"),
    ]
    return _table(("setting", "value"), rows, numeric_from=99)


def _queue_table(scenario: Scenario) -> str:
    if not scenario.queues:
        return ""
    rows = [
        (
            q.name,
            f"{q.weight:g}",
            str(q.guarantee.gpu),
            "unlimited" if q.capability.gpu is None else str(q.capability.gpu),
            "yes" if q.reclaimable else "no",
        )
        for q in scenario.queues
    ]
    return _table(
        ("queue", "weight", "guarantee (GPUs)", "capability (GPUs)", "reclaimable"),
        rows,
        numeric_from=1,
    )


def _workload_table(scenario: Scenario) -> str:
    if not scenario.workload:
        return ""
    rows = [
        (
            m.queue,
            m.kind,
            f"{m.jobs_per_day:g}",
            str(m.priority),
            ", ".join(str(g) for g in m.gpus_per_pod),
            ", ".join(str(p) for p in m.pods),
            f"{m.duration_h_median:g}",
        )
        for m in scenario.workload
    ]
    return _table(
        ("queue", "kind", "jobs / day", "priority", "GPUs / pod", "pods", "median hours"),
        rows,
        numeric_from=2,
    )


def _metrics_table(results: dict[str, PolicyResult]) -> str:
    rows = [
        (label, *(fmt.format(getattr(r.metrics, key)) for r in results.values()))
        for key, label, fmt in METRIC_ROWS
    ]
    return _table(("metric", *results), rows, numeric_from=1)
