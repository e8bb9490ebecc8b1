"""Which device the engine runs on, and how much memory it has. Two GPUs mean two workers, one per
`cuda:N`: Quail runs no tensor parallelism."""

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from quail.constants import DEVICE_HELP
from quail.errors import QuailError


def resolve_device(spec: str = "auto") -> torch.device:
    if spec == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(spec)
    except (RuntimeError, TypeError):
        raise QuailError(f"device {spec!r}: choose {DEVICE_HELP}", parameter="device") from None
    if device.type == "cpu":
        return torch.device("cpu")
    if device.type != "cuda":
        raise QuailError(f"device {spec!r}: choose {DEVICE_HELP}", parameter="device")
    if not torch.cuda.is_available():
        raise QuailError(f"device {spec}: torch {torch.__version__} sees no CUDA device on this machine; "
                         f"choose cpu or auto", parameter="device")
    index, count = device.index or 0, torch.cuda.device_count()
    if index >= count:
        raise QuailError(f"device {spec}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}",
                         parameter="device")
    return torch.device("cuda", index)


@dataclass(frozen=True)
class DeviceMemory:
    total: int  # bytes
    free: int  # bytes free now: on a GPU, unallocated; on a CPU, the kernel's MemAvailable


def device_memory(device: torch.device) -> DeviceMemory:
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return DeviceMemory(total, free)
    info = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, value = line.split(":", 1)
                info[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return DeviceMemory(pages, os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return DeviceMemory(info["MemTotal"], info.get("MemAvailable", info["MemFree"]))


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"{platform.processor() or platform.machine()} x{torch.get_num_threads()}"


def cpu_info() -> tuple[str, str]:
    """This CPU's model name and flags as /proc/cpuinfo gives them (empty where it gives none)."""
    name, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            field, _, value = line.partition(":")
            if field.strip() == "model name" and not name:
                name = value.strip()
            elif field.strip() == "flags" and not flags:
                flags = value.strip()
    except OSError:
        pass
    return name, flags


def synchronize(device: torch.device) -> None:
    """Waits for the device's queued work, so wall-clock timings of GPU work are true."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
