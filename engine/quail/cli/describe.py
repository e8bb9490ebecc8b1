"""How `quail worker status` writes a worker, its jobs, and (with --all) each worker's load."""

from quail.errors import QuailError


def describe_worker(info: dict) -> str:
    """The worker's model, device and memory, from its `info`."""
    m, gib = info["memory"], 1 << 30
    memory = (f"{m['device']}: {m['memory_free'] / gib:.1f} of {m['memory_total'] / gib:.1f} GiB free after "
              f"{m['weights_bytes'] / gib:.2f} GiB of weights, reserve {m['reserve_bytes'] / gib:.2f} GiB; "
              f"arena {info['arena_pages']:,} pages ({m['rule']})") if m else \
        f"{info['device']}: arena {info['arena_pages']:,} pages"
    cascades = f"; cascade models loaded: {', '.join(info['cascade_models'])}" if info["cascade_models"] else ""
    weights = "" if info["weights_loaded"] else "; weights not read yet: at the first job that computes"
    return (f"{info['model']} ({info['dtype']}: {info.get('dtype_why') or 'given'}; attention {info['attention']}: "
            f"{info['attention_why']}{weights}) on {memory}, "
            f"{info['free_pages']:,} free, {info['retained_pages']:,} retained; {info['max_batch_tokens']:,} tokens "
            f"a pass; answers in {info.get('answer_store') or 'no store'}{cascades}")


def describe_job(job: dict) -> str:
    """One job of the worker's `status`: whose it is, how far it got, and its window's place in the table."""
    stats = job["stats"] or {}
    return (f"{job['ref'][:12]}  {job['origin']['dag_id']}/{job['origin']['run_id']}/"
            f"{job['origin']['task_id']}  {job['state']:<9} {job['rows_done']}/{job['rows']} rows  "
            f"{job['tokens_per_second']:,.0f} tok/s  "
            f"computed {stats.get('tokens_computed', job['tokens_computed']):,}" + whole_table(job))


def whole_table(job: dict) -> str:
    """Where a window's job stands in its operator's whole table."""
    if job["table_rows"] is None:
        return ""
    done = job["first_row"] + job["rows_done"]
    eta = f", about {job['eta_seconds']:,.0f} s left" if job["eta_seconds"] is not None else ""
    return f"  table: {done:,}/{job['table_rows']:,} rows ({100 * done / max(job['table_rows'], 1):.0f}%){eta}"


def describe_load(location: str, token: str | None, tls_ca: str | None = None) -> str:
    """One worker's line in `status --all`: its load, or why it does not answer."""
    from quail.worker import client

    try:
        return f"{location}  {client.describe_load(client.WorkerClient(location, token, 5, tls_ca).info())}"
    except QuailError as e:
        return f"{location}  does not answer: {e}"
