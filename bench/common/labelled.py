"""The labelled public data of bench/data (Wikipedia leads, CC BY-SA 4.0; bench/data/README.md says
how they were made): the sets' questions and labels, and their readers."""

import csv

from bench.common.results import DATA

MODELS = ["smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]  # in order of size
TASKS = ["filter", "classify", "join"]
FILTER_QUESTION = "Is this article about a person?"  # the label: Wikipedia files it under People
TOPICS = ["arts", "biology and health", "geography", "history", "technology"]
CLASSIFY_QUESTION = "Which topic is this article about?"
# --descriptions: what each topic covers, written from the topics' names before any run with them
TOPIC_DESCRIPTIONS = {
    "arts": "painting, sculpture, music, film, literature, theatre, dance, and the people who make them",
    "biology and health": "living things, the body, medicine, disease and health",
    "geography": "places, countries, cities, rivers, mountains, climate and populations",
    "history": "past events, wars, empires, dynasties, revolutions and historical figures",
    "technology": "machines, computers, software, engineering, inventions and industry",
}
JOIN_CONDITIONS = {  # the right column's name is the prompt's name for a right row, as in the CLI
    "description": "The description is the short description of the subject of the document.",
    "title": "The title is the title of the document.",
}


def read(name: str, split: str, rows: int | None) -> list[dict]:
    with open(DATA / name, newline="", encoding="utf-8") as f:
        got = [r for r in csv.DictReader(f) if r["split"] == split]
    return got[:rows] if rows else got


def load(split: str, rows: int | None, join_on: str) -> dict:
    articles = read("join_articles.csv", split, rows)
    ids = {a["id"] for a in articles}
    right = [r for r in read("join_titles.csv", split, None) if r["id"] in ids]  # the file's own (shuffled) order
    where = {r["id"]: j for j, r in enumerate(right)}
    return {"filter": read("filter.csv", split, rows), "classify": read("classify.csv", split, rows),
            "join_left": [a["text"] for a in articles], "join_right": [r[join_on] for r in right],
            "join_truth": [where[a["id"]] for a in articles]}
