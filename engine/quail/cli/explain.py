"""`quail explain PIPELINE.yaml`: the plan of a pipeline file and its predicted token accounting,
by the run path of `quail pipeline` (cli/run.py), which stops before computing."""

import argparse

from quail.cli.run import KEYS, compute, from_file, pipeline_parser


def add_parser(sub: argparse._SubParsersAction) -> None:
    pipeline_parser(sub, "explain", "print a pipeline's plan and predicted token accounting; run nothing") \
        .set_defaults(func=explain)


def explain(args: argparse.Namespace) -> None:
    compute(args, from_file(args), explain=True, words=KEYS)
