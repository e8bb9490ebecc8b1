"""The Quail page's HTML: the workers, the recent runs, and one run's tasks with their plan and
token accounting, charted as server-rendered SVG (no script, no CDN: the UI may run offline).
Pure functions of plain data, so they are tested without a server."""

from html import escape
from urllib.parse import quote

from quail.constants import MECHANISMS
from quail.worker.jobs import JobState
from quail.worker.routing import DIRECT, ROUTES

COLORS = {"computed": "#c0504d", "rewind": "#4f81bd", "sharing": "#9bbb59", "retention": "#8064a2", "store": "#f79646"}
STYLE = """body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}h1{font-size:1.4rem;overflow-wrap:anywhere}
h2{font-size:1.1rem;margin-top:1.5rem}.muted{color:#777}svg{max-width:100%;height:auto}
table{border-collapse:collapse;margin:.5rem 0 1.5rem;font-size:.9375rem}
td,th{border:1px solid #ccc;padding:.25rem .45rem;text-align:right}td.l{overflow-wrap:anywhere}th{background:#f4f4f4}
td.l,th.l{text-align:left}tr>.l:first-child{grid-column:1/-1}th[colspan='3']{grid-column:span 3}"""


def _wrapped(width: int, tables: str, columns: str) -> str:
    """Tables wrap rather than scroll: below `width` each row of `tables` is a grid whose first cell
    heads it, and whose other cells wrap as the header row's do, so the columns still line up. The
    DAG run's side panel is about 600 px wide."""
    return (f"@media (max-width:{width}px){{{tables},{tables} tbody{{display:block}}{tables} tr{{display:grid;"
            f"grid-template-columns:{columns};border-top:2px solid #bbb}}}}")


# The widest tables wrap first, every table below 800 px; where two rules apply, the later wins. The
# predicted table (16 columns, three a part) keeps a multiple of 3 columns so its parts line up.
PREDICTED, FIT = "table:where(:has(th:nth-child(15)))", "repeat(auto-fit,minmax(6rem,1fr))"
STYLE += "".join(_wrapped(*rule) for rule in (
    (1300, "table:where(:has(th:nth-child(10)))", FIT), (1500, PREDICTED, "repeat(9,minmax(0,1fr))"),
    (800, "table", FIT), (800, PREDICTED, "repeat(6,minmax(0,1fr))"), (420, PREDICTED, "repeat(3,minmax(0,1fr))")))
STYLE += "@media (max-width:800px){table{font-size:.875rem}}"


def page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>")


def workers_html(workers: list[dict]) -> str:
    if not workers:
        return "<p class='muted'>No worker answers (a local worker starts with the first Quail task).</p>"
    rows = []
    for w in workers:
        i = w["info"]
        used = i["arena_pages"] - i["free_pages"]
        running = [j for j in w["jobs"] if j["state"] in (JobState.QUEUED, JobState.RUNNING)]
        jobs = "<br>".join(f"{escape(j['origin']['dag_id'])}/{escape(j['origin']['task_id'])}: "
                           f"{j['rows_done']}/{j['rows']} rows, {j['tokens_per_second']:,.0f} tok/s" for j in running)
        rows.append(f"<tr><td class='l'>{escape(w['location'])}</td><td class='l'>{escape(i['model'])}</td>"
                    f"<td class='l'>{escape(i['device'])} {escape(i['dtype'])}</td><td>{i['arena_pages']:,}</td>"
                    f"<td>{used:,}</td><td>{i['retained_pages']:,}</td><td>{i['free_pages']:,}</td>"
                    f"<td class='l'>{jobs or '<span class=muted>idle</span>'}</td></tr>")
    return ("<table><tr><th class='l'>worker</th><th class='l'>model</th><th class='l'>device</th><th>arena pages</th>"
            "<th>used</th><th>retained</th><th>free</th><th class='l'>jobs running</th></tr>"
            + "".join(rows) + "</table>")


def runs_html(runs: list[dict]) -> str:
    if not runs:
        return "<p class='muted'>No DAG run has Quail tasks yet.</p>"
    rows = "".join(f"<tr><td class='l'><a href='runs/{_part(r['dag_id'])}/{_part(r['run_id'])}'>"
                   f"{escape(r['dag_id'])}</a></td><td class='l'>{escape(r['run_id'])}</td><td>{r['tasks']}</td>"
                   f"<td>{r['tokens_computed']:,}</td><td>{r['tokens_naive']:,}</td></tr>" for r in runs)
    return ("<table><tr><th class='l'>DAG</th><th class='l'>run</th><th>Quail tasks</th><th>tokens computed</th>"
            "<th>without reuse</th></tr>" + rows + "</table>")


def routing_html(by_dag: dict[str, dict[str, int]]) -> str:
    """Each DAG's share of tasks that ran at their partition's home: where it falls, KV retained for
    a consumer is lost and the pool is too small or unbalanced (docs/deploying.md, "Watching a pool")."""
    if not by_dag:
        return "<p class='muted'>No Quail task has recorded how it was routed yet.</p>"
    rows = []
    for dag_id, counts in by_dag.items():
        n = sum(counts.values())
        routed = n - counts[DIRECT]  # a task of a connection of one worker had no choice
        share = f"{counts['home'] / routed:.0%}" if routed else "<span class='muted'>-</span>"
        rows.append(f"<tr><td class='l'>{escape(dag_id)}</td><td>{n:,}</td>"
                    + "".join(f"<td>{counts[k]:,}</td>" for k in ROUTES) + f"<td>{share}</td></tr>")
    return ("<table><tr><th class='l'>DAG</th><th>Quail tasks</th>" + "".join(f"<th>{k}</th>" for k in ROUTES)
            + "<th>at home</th></tr>" + "".join(rows) + "</table>")


def _part(name: str) -> str:
    """A run's or a DAG's id as one segment of a link: a run id may hold '/', '?', '#' or quotes."""
    return escape(quote(name, safe=""))


def run_html(dag_id: str, run_id: str, tasks: dict[str, dict]) -> str:
    if not tasks:
        return page(f"{dag_id} / {run_id}", "<p class='muted'>This run has no finished Quail task.</p>")
    rows = []
    for name, m in tasks.items():
        s, op = m["stats"], (m.get("plan") or {}).get("operator") or {}
        retain = op.get("retain")
        keep = ", ".join(retain["consumers"]) if retain else "nothing"
        saved = 1 - s["tokens_computed"] / s["tokens_naive"] if s["tokens_naive"] else 0.0
        workers = m.get("workers") or ({m["worker"]: m.get("windows", 1)} if m.get("worker") else {})
        ran_on = ", ".join(f"{w} ({n})" for w, n in workers.items())
        routing = m.get("routing") or {}
        why = f" title='{escape(routing['routed'])}: {escape(routing['why'])}'" if routing else ""
        rows.append(f"<tr><td class='l'>{escape(name)}</td><td class='l'{why}>{escape(ran_on)}</td>"
                    f"<td>{m['rows_in']:,}</td><td>{m['rows_out']:,}</td>"
                    f"<td class='l'>{'on' if op.get('rewind') else 'off'}</td>"
                    f"<td class='l'>{'on' if op.get('sharing') else 'off'}</td><td class='l'>{escape(keep)}</td>"
                    f"<td>{s['tokens_computed']:,}</td>"
                    + "".join(f"<td>{s['tokens_reused'].get(k, 0):,}</td>" for k in MECHANISMS)
                    + f"<td>{s['tokens_naive']:,}</td><td>{saved:.0%}</td>"
                    + f"<td>{s.get('tokens_generated', 0):,}</td></tr>")
    table = ("<table><tr><th class='l'>task</th><th class='l'>worker (windows)</th><th>rows in</th><th>rows out</th>"
             "<th class='l'>rewind</th>"
             "<th class='l'>sharing</th><th class='l'>KV retained for</th><th>computed</th>"
             + "".join(f"<th>{k}</th>" for k in MECHANISMS) + "<th>without reuse</th><th>saved</th>"
             "<th title='tokens an extract or a map wrote, beside its prompts'>written</th></tr>"
             + "".join(rows) + "</table>")
    return page(f"{dag_id} / {run_id}", "<h2>Tokens by task</h2>" + tokens_svg(tasks) + table
                + "<h2>Predicted and actual</h2>" + predicted_html(tasks) + joins_html(tasks))


def joins_html(tasks: dict[str, dict]) -> str:
    """Each blocked join's pairs asked against the pairs in its product, and its recall: certified
    against a target, or estimated (docs/design.md, "Blocked joins")."""
    rows = []
    for name, m in tasks.items():
        b = m["stats"].get("blocking")
        if not b:
            continue
        share = b["asked"] / b["pairs"] if b["pairs"] else 0.0
        if b.get("target") is not None:
            recall = f"&ge; {b['recall_lower']:.3f} certified (target {b['target']:g}, delta {b['delta']:g})"
        elif b.get("recall_estimate") is not None:
            recall = f"about {b['recall_estimate']:.3f}, estimated"
        else:
            recall = "<span class='muted'>-</span>"
        rows.append(f"<tr><td class='l'>{escape(name)}</td><td class='l'>{escape(b['mode'])}</td>"
                    f"<td>{b['pairs']:,}</td><td>{b['asked']:,}</td><td>{share:.2%}</td>"
                    f"<td class='l'>{recall}</td></tr>")
    if not rows:
        return ""
    return ("<h2>Joins</h2><table><tr><th class='l'>task</th><th class='l'>pairs chosen by</th><th>pairs</th>"
            "<th>asked</th><th>share</th><th class='l'>recall</th></tr>" + "".join(rows) + "</table>")


def predicted_html(tasks: dict[str, dict]) -> str:
    """The planner's expected tokens (from the documents each window held) beside what ran: how far
    to trust the plan's choices. A manifest from before predictions were kept shows none."""
    columns = ("computed", *MECHANISMS)

    def count(doc: dict, column: str) -> int:
        return doc["tokens_computed"] if column == "computed" else doc["tokens_reused"].get(column, 0)

    rows = []
    for name, m in tasks.items():
        p, s = m.get("predicted"), m["stats"]
        if p is None:
            continue
        cells = "".join(f"<td>{count(p, k):,}</td><td>{count(s, k):,}</td>"
                        f"<td>{_deviation(count(p, k), count(s, k))}</td>" for k in columns)
        rows.append(f"<tr><td class='l'>{escape(name)}</td>{cells}</tr>")
    if not rows:
        return "<p class='muted'>No prediction was kept for these tasks.</p>"
    head = "".join(f"<th colspan='3'>{k}</th>" for k in columns)
    sub = "<th>predicted</th><th>actual</th><th>off by</th>" * len(columns)
    return f"<table><tr><th class='l' rowspan='2'>task</th>{head}</tr><tr>{sub}</tr>{''.join(rows)}</table>"


def _deviation(predicted: int, actual: int) -> str:
    if predicted == actual:
        return "0%"
    if actual == 0:
        return "<span class='muted'>-</span>"
    return f"{(predicted - actual) / actual:+.1%}"


def tokens_svg(tasks: dict[str, dict], width: int = 720, bar: int = 22) -> str:
    """One bar per task, as long as its no-reuse count: computed, then reused by each mechanism."""
    most = max((m["stats"]["tokens_naive"] for m in tasks.values()), default=0) or 1
    label, scale = 130, (width - 140) / most
    shapes, y = [], 0
    for name, m in tasks.items():
        s, x = m["stats"], label
        for what in ("computed", *MECHANISMS):
            n = s["tokens_computed"] if what == "computed" else s["tokens_reused"].get(what, 0)
            w = n * scale
            if w > 0:
                shapes.append(f"<rect x='{x:.1f}' y='{y}' width='{w:.1f}' height='{bar}' fill='{COLORS[what]}'>"
                              f"<title>{escape(name)} {what}: {n:,}</title></rect>")
            x += w
        shapes.append(f"<text x='0' y='{y + bar - 6}' font-size='13'>{escape(name[:18])}</text>")
        y += bar + 8
    legend = "".join(f"<rect x='{label + 110 * i}' y='{y}' width='12' height='12' fill='{COLORS[p]}'/>"
                     f"<text x='{label + 110 * i + 16}' y='{y + 11}' font-size='12'>{p}</text>"
                     for i, p in enumerate(("computed", *MECHANISMS)))
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{y + 20}' "
            f"viewBox='0 0 {width} {y + 20}' role='img' aria-label='tokens computed and reused by task'>"
            f"{''.join(shapes)}{legend}</svg>")
