"""The memory this process may actually use: the least of the machine's memory, its own limits
(`ulimit -v`, `ulimit -d`) and its control group's (cgroup v2 `memory.max`, v1
`memory.limit_in_bytes`), so that limits derived from memory (`fastlbp ground`'s default
`--max-rule-instances`) hold in a container or a batch job, not only on a bare machine.

    limit = memory_limit()     # MemoryLimit(bytes=..., source="the address-space limit (ulimit -v) of ...")
    str(limit)                 # "3.6 GB (the address-space limit (ulimit -v) of 4.1 GB, less 0.5 GB ...)"

A low-level helper: it reads /proc and /sys and `resource`, and imports nothing of fastlbp's.
"""

from __future__ import annotations

import dataclasses
import os

# A cgroup v1 "no limit" is the largest page-aligned int64 (9223372036854771712); anything past 2^60
# bytes is no limit in practice.
_UNLIMITED = 1 << 60


@dataclasses.dataclass(frozen=True)
class MemoryLimit:
    """Bytes this process may use, and which limit says so (for error messages).

    Attributes:
        bytes: the least of the limits below, less what this process already
            uses where the limit counts it (its address space, its data).
        source: which limit that is, in words.
    """

    bytes: int
    source: str

    def __str__(self) -> str:
        return f"{self.bytes / 1e9:.1f} GB ({self.source})"


def _machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not known here
        return None


def _status_bytes(field: str, status_path: str = "/proc/self/status") -> int:
    """A `kB` field of /proc/self/status (VmSize, VmData) in bytes; 0 when not known."""
    try:
        with open(status_path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _rlimits() -> list[tuple[int, str]]:
    """(bytes left, source) of the address-space and data limits that are set."""
    try:
        import resource
    except ImportError:  # not a Unix
        return []
    out = []
    for name, field, what in (("RLIMIT_AS", "VmSize", "the address-space limit (ulimit -v)"),
                              ("RLIMIT_DATA", "VmData", "the data-segment limit (ulimit -d)")):
        which = getattr(resource, name, None)
        if which is None:
            continue
        try:
            soft, _ = resource.getrlimit(which)
        except (OSError, ValueError):
            continue
        if soft == resource.RLIM_INFINITY or soft < 0 or soft >= _UNLIMITED:
            continue
        used = _status_bytes(field)
        out.append((max(0, soft - used), f"{what} of {soft / 1e9:.1f} GB, less {used / 1e9:.1f} GB this "
                    "process already uses"))
    return out


def _read_number(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 <= value < _UNLIMITED else None


def _cgroup_limits(cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
                   ) -> list[tuple[int, str]]:
    """(bytes, source) of the memory limits of this process's control group and of each group above it
    (a parent's limit holds for its children), for cgroup v2 and v1 alike. Inside a container the
    group's path may not exist under the mount (the mount is the container's own group): every folder
    from the path up to the mount's root that exists is read."""
    try:
        with open(proc_cgroup, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    candidates = []  # (folder, file name, version)
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":  # v2: one unified hierarchy
            for mount in (cgroup_root, os.path.join(cgroup_root, "unified")):
                candidates.append((mount, path, "memory.max", "cgroup v2 memory.max"))
        elif "memory" in controllers.split(","):
            candidates.append((os.path.join(cgroup_root, "memory"), path, "memory.limit_in_bytes",
                               "cgroup v1 memory.limit_in_bytes"))
    out = []
    for mount, path, name, what in candidates:
        rel = path.strip("/")
        while True:
            folder = os.path.join(mount, rel) if rel else mount
            value = _read_number(os.path.join(folder, name))
            if value is not None:
                out.append((value, f"the control group's memory limit ({what}: {value / 1e9:.1f} GB)"))
            if not rel:
                break
            rel = os.path.dirname(rel)
    return out


def memory_limit(*, cgroup_root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup"
                 ) -> MemoryLimit | None:
    """The memory this process may use: the least of the machine's memory, `RLIMIT_AS` and
    `RLIMIT_DATA` (less what the process already uses of each) and the cgroup limits above it.

    Args:
        cgroup_root, proc_cgroup: where the cgroup file systems and this process's cgroup list are
            (tests point them at a folder of their own).

    Returns:
        The limit, or None when none of them can be read (not Linux, no /proc).
    """
    limits = []
    machine = _machine_memory()
    if machine:
        limits.append((machine, f"the machine's memory, {machine / 1e9:.1f} GB"))
    limits += _rlimits()
    limits += _cgroup_limits(cgroup_root, proc_cgroup)
    if not limits:
        return None
    value, source = min(limits, key=lambda item: item[0])
    return MemoryLimit(value, source)


__all__ = ["MemoryLimit", "memory_limit"]
