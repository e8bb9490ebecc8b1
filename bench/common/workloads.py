"""Synthetic workloads' rows: product reviews and incremental agent traces (each row the previous
one plus a turn), seeded; examples/traces.csv was written by `traces()`."""

import random

PRODUCTS = ["kettle", "blender", "desk lamp", "backpack", "headphones", "rice cooker", "office chair",
            "e-reader", "tent", "coffee grinder", "monitor", "running shoes"]
GOOD = ["works exactly as described", "feels solid and well made", "was easy to set up", "is quiet",
        "arrived a day early", "looks great on my desk", "has lasted two years of daily use"]
BAD = ["stopped working after a week", "smells of plastic", "is much louder than advertised",
       "arrived with a cracked lid", "has a wobbly base", "drains the battery overnight"]
EXTRA = ["The price was fair for what you get.", "Customer service answered within a day.",
         "I bought it as a gift for my sister.", "The instructions were confusing.",
         "Packaging was mostly cardboard, which I appreciate.", "I would buy it again.",
         "It replaced an older model that broke.", "Shipping took almost three weeks."]
TOOLS = ["search_docs", "run_tests", "read_file", "edit_file", "list_dir"]


def reviews(n: int, rng: random.Random) -> list[str]:
    out = []
    for _ in range(n):
        product = rng.choice(PRODUCTS)
        good = rng.random() < 0.5
        parts = [f"I ordered the {product} last month."]
        parts += [f"It {rng.choice(GOOD if good else BAD)}." for _ in range(rng.randint(1, 3))]
        parts += rng.sample(EXTRA, rng.randint(2, 5))
        parts.append(f"Overall {'recommended' if good else 'not recommended'}, {rng.randint(1, 5)} stars.")
        out.append(" ".join(parts))
    return out


def traces(n_traces: int, turns: int, rng: random.Random) -> list[str]:
    rows = []
    for t in range(n_traces):
        text = f"Task {t}: fix the failing test in module {rng.choice(PRODUCTS).replace(' ', '_')}."
        for k in range(turns):
            tool = rng.choice(TOOLS)
            text += (f"\n\nTurn {k + 1}. Thought: I should use {tool} to check step {k + 1}."
                     f"\nAction: {tool}(path='src/part_{rng.randint(1, 99)}.py')"
                     f"\nObservation: {rng.choice(EXTRA)} {rng.choice(GOOD + BAD)}; exit code {rng.randint(0, 2)}.")
            rows.append(text)
    return rows
