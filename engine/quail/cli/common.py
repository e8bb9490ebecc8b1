"""What several `quail` commands share: the parser whose errors read as Quail's, the argparse types,
the device and answer-store options, and starting the engine on them. Each command's module sits
above this one; this one imports none of them."""

import argparse
import ipaddress
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from quail.constants import (
    DEFAULT_CUDA_MAX_BATCH_TOKENS,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_BATCH_TOKENS,
    DEVICE_HELP,
)
from quail.installed import require_engine
from quail.model.registry import DTYPE_CHOICES

if TYPE_CHECKING:
    from quail.session import Session


class Parser(argparse.ArgumentParser):
    """Errors read as Quail's own: `quail: error: --threads must be at least 1, got 0`."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        message = re.sub(r"^argument ([^:]+): ", r"\1 ", message)
        self.exit(2, f"quail: error: {message}\n")


def at_least(low: int, high: int = 2**31 - 1) -> Callable[[str], int]:
    """An argparse type: a whole number within [low, high]."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}" if value < low else
                                             f"must be at most {high}, got {value}")
        return value
    return parse


HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def host(text: str) -> str:
    """An argparse type: an IPv4 or IPv6 address, or a host name."""
    try:
        ipaddress.ip_address(text)
    except ValueError:
        if not HOST_NAME.fullmatch(text) or len(text) > 253:
            raise argparse.ArgumentTypeError(f"must be a host name or an IP address, got {text!r}") from None
    return text


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text}")
    return value


def device_options() -> Parser:
    """What every command that loads a model takes: where and how it runs."""
    p = Parser(add_help=False)
    p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                   help="auto: bfloat16 on a GPU or an AMX CPU, float32 on other CPUs (faster there)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--arena-pages", type=at_least(1),
                   help="KV arena size in 16-token pages (default: sized from the device's memory on a GPU, "
                        "1 GiB of KV on a CPU)")
    p.add_argument("--gpu-memory-utilization", type=float, default=DEFAULT_GPU_MEMORY_UTILIZATION,
                   help="the share of the device's free memory after the weights that the arena and one "
                        "pass's activations may take")
    p.add_argument("--max-batch-tokens", type=at_least(16),
                   help=f"most tokens in one forward pass (default: {DEFAULT_MAX_BATCH_TOKENS:,} on a CPU, "
                        f"{DEFAULT_CUDA_MAX_BATCH_TOKENS:,} on CUDA)")
    p.add_argument("--threads", type=at_least(1), default=None, help="torch CPU threads (default: all cores)")
    return p


def no_password(location: str) -> str:
    """--answer-store, unless it holds a password: a command line is in /proc/PID/cmdline, which
    every local user reads (there is no --token flag for that reason)."""
    if "://" in location and (authority := location.split("://", 1)[1].split("/", 1)[0]).count("@") \
            and ":" in authority.rsplit("@", 1)[0]:
        raise argparse.ArgumentTypeError("a URL with a password is on the command line, which every local user can "
                                         "read (ps, /proc): give the URL in a private file with --answer-store-file, "
                                         "or the password by PGPASSWORD or PGPASSFILE")
    return location


def store_options(p: argparse.ArgumentParser, more: str = "") -> None:
    """--answer-store or --answer-store-file, one or neither."""
    where = p.add_mutually_exclusive_group()
    where.add_argument("--answer-store", metavar="PATH|URL", type=no_password,
                       help="the answer store: a path (SQLite; default answers.sqlite in $QUAIL_HOME), or a "
                            "postgresql+psycopg://USER@HOST:PORT/DB URL, its password by PGPASSWORD or PGPASSFILE; "
                            "default $QUAIL_ANSWER_STORE" + more)
    where.add_argument("--answer-store-file", metavar="FILE",
                       help="a file, readable by its owner alone, that holds the store's URL with its password "
                            "(default $QUAIL_ANSWER_STORE_FILE)")


def start_engine(args: argparse.Namespace, command: str) -> None:
    """Refuses `command` where the engine is not installed; else gives torch --threads threads."""
    require_engine(command)
    import torch

    torch.set_num_threads(args.threads or os.cpu_count() or 1)


def open_session(model: str, args: argparse.Namespace, say: Callable[[str], None] | None = None) -> "Session":
    """A session on the device options' settings."""
    from quail.session import Session

    return Session.open(model, args.dtype, args.arena_pages, args.max_batch_tokens, args.device,
                        args.gpu_memory_utilization, say)
