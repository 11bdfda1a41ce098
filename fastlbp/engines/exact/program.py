"""A bucket tree laid out for one run: host arena, device arena, gather indices and device descriptors.

Built once per graph and labelled set (the label *values* only change the input tables' entries, not
the layout), so a repeated call does no planning and no index computation: `eliminate.run` fills the
inputs, walks the host buckets with precomputed gathers and replays the device rows.

Host arena (numpy float64): [0] = 0 (what an empty input reads), the clamped log tables (in table order),
then each host bucket's table (2^r, later its belief) and message (2^(r-1)), then the separator tables
that device parents send down to host children.

Device arena (`kernels`): [0] = 0, the download region (log marginals of the device buckets, 2 each, then
the separator tables for host children), the upload region (the input tables of device buckets and the
messages of host children to device parents, one transfer), each device bucket's table and message, a
scratch separator table, and slack for the last chunk's window.

Which buckets run where: a bucket with at least `host_below` entries runs on the device, and so does every
ancestor of one, so the host's forward pass never waits for the device (a host bucket has no device
descendant): host forward, one upload, the device's passes, one download, host backward.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from fastlbp.engines.exact import kernels
from fastlbp.engines.exact.order import BucketTree


@functools.lru_cache(maxsize=4096)
def _pext_table(r: int, mask: int) -> np.ndarray:
    """(2^r,) int64: the index of each entry of a rank-r table in its sub-table over the bits of `mask`."""
    e = np.arange(2**r, dtype=np.int64)
    out = np.zeros_like(e)
    for j in reversed(range(r)):
        if (mask >> j) & 1:
            out = (out << 1) | ((e >> j) & 1)
    out.flags.writeable = False
    return out


def _pdep(src: np.ndarray, mask: int, r: int) -> np.ndarray:
    out = np.zeros_like(src)
    for j in range(r):
        if (mask >> j) & 1:
            out |= (src & 1) << j
            src = src >> 1
    return out


@functools.lru_cache(maxsize=4096)
def _separator_table(p: int, sepmask: int) -> np.ndarray:
    """(2^ro, 2^rs) int64: entry (o, s) of a rank-p parent with separator bits `sepmask`, other bits o.

    Others first: numpy reduces over a leading axis as whole-row operations, and over a trailing axis of
    length 2 (the usual case) one tiny reduction per row (4x slower for the host's backward pass of a
    12 x 12 grid).
    """
    rs = bin(sepmask).count("1")
    s = _pdep(np.arange(2**rs, dtype=np.int64), sepmask, p)
    o = _pdep(np.arange(2 ** (p - rs), dtype=np.int64), ((1 << p) - 1) & ~sepmask, p)
    out = o[:, None] | s[None, :]
    out.flags.writeable = False
    return out


def _mask(scope: tuple[int, ...], subset) -> int:
    r = len(scope)
    sub = set(subset)
    return sum(1 << (r - 1 - a) for a, v in enumerate(scope) if v in sub)


@dataclasses.dataclass
class Program:
    """Everything a run needs besides the input values (see the module docstring).

    Attributes:
        plan: the bucket tree.
        src, lab_var, lab_stride: (N,), (N, 3), (N, 3) int64: input entry j is logflat[src[j] +
            sum_k labels[lab_var[j, k]] * lab_stride[j, k]] (lab_var -1: none; the label array has 0 last).
        constants: (c,) int64 host-arena indices of the inputs with no variable left.
        host_size: entries of the host arena.
        host_forward: per host bucket in order: (b_off, entries, m_off, gather (k, entries) int64).
        host_backward: per host bucket in reverse order: (bucket, b_off, entries, m_off, sep) with sep
            None (a root), a (2^ro, 2^rs) gather of the parent's belief ((2^rs,) when ro = 0), or an
            int (the host offset of its separator table, sent down by the device).
        host_marginals: (buckets (G,), indices (G, entries) of their beliefs) per host bucket size: their
            marginals batched after the backward pass (one reduction per size, not per bucket).
        forward_groups: the host forward pass as `ForwardGroup`s, lowest height first (`group_forward`).
        backward_groups: the host backward pass as `BackwardGroup`s, roots' children first.
        device: the buckets on the device, in order (their log marginals: the download's first 2 * len).
        upload: host-arena indices of the upload block; upload_off: its device-arena offset.
        rows: (R, kernels.WIDTH) int64 descriptors; calls: (kernel name, chunk, chunks) per row.
        download: (n,) entries read back from device-arena offset 1; outbox: (host offset, download
            offset, entries) of the separator tables for host children.
        device_size: entries of the device arena needed.
    """

    plan: BucketTree
    src: np.ndarray
    lab_var: np.ndarray
    lab_stride: np.ndarray
    constants: np.ndarray
    host_size: int
    host_forward: list
    host_backward: list
    host_marginals: list
    device: np.ndarray
    upload: np.ndarray
    upload_off: int
    rows: np.ndarray
    calls: list
    download: int
    outbox: list
    device_size: int
    forward_groups: list = dataclasses.field(default_factory=list)
    backward_groups: list = dataclasses.field(default_factory=list)

    @property
    def device_buckets(self) -> int:
        return len(self.device)


@dataclasses.dataclass(frozen=True)
class ForwardGroup:
    """Host buckets of one height in the bucket tree with the same table size and number of inputs, whose
    forward step runs as one numpy operation (none of them reads another's message: a parent is higher
    than its children).

    Attributes:
        b_off: (G,) int64 host-arena offsets of the buckets' tables.
        m_off: (G,) int64 offsets of their messages.
        gather: (G, k, entries) int64 the k inputs' entries each table sums.
    """

    b_off: np.ndarray
    m_off: np.ndarray
    gather: np.ndarray

    @property
    def entries(self) -> int:
        return int(self.gather.shape[2])


@dataclasses.dataclass(frozen=True)
class BackwardGroup:
    """Host buckets of one depth (parents' beliefs all final) with the same table size and separator
    shape: one Hugin update B_i += sep - m_i for all of them.

    Attributes:
        b_off: (G,) int64 offsets of the buckets' tables (their beliefs after the update).
        m_off: (G,) int64 offsets of their messages.
        sep: (G, entries / 2) int64 where each separator entry is (the parent's whole scope, or a table a
            device parent sent down), or (G, others, entries / 2) the parent's belief entries to
            logsumexp over the others axis.
    """

    b_off: np.ndarray
    m_off: np.ndarray
    sep: np.ndarray

    @property
    def entries(self) -> int:
        return 2 * int(self.sep.shape[-1])


def group_forward(host_forward: list, parent: list[int], host: np.ndarray) -> list[ForwardGroup]:
    """`host_forward` (per host bucket, in order) as `ForwardGroup`s, lowest height first.

    The host part of a derivation graph's bucket tree is shallow and wide (taint family, avrora size:
    27,595 buckets in 713 groups, height 36), so a forward pass is hundreds of numpy calls, not tens of
    thousands of per-bucket ones.
    """
    height = {}
    for i in host:  # children come before parents in the order
        height.setdefault(int(i), 0)
        p = parent[int(i)]
        if p >= 0:
            height[p] = max(height.get(p, 0), height[int(i)] + 1)
    keys: dict[tuple, list[int]] = {}
    for j, i in enumerate(host):
        b_off, entries, m_off, gather = host_forward[j]
        keys.setdefault((height[int(i)], entries, len(gather)), []).append(j)
    groups = []
    for key in sorted(keys):
        js = keys[key]
        groups.append(ForwardGroup(np.array([host_forward[j][0] for j in js], np.int64),
                                   np.array([host_forward[j][2] for j in js], np.int64),
                                   np.stack([host_forward[j][3] for j in js])))
    return groups


def group_backward(host_backward: list, parent: list[int]) -> list[BackwardGroup]:
    """`host_backward` (per host bucket, parents first) as `BackwardGroup`s, shallowest first (roots,
    which have nothing to update, left out)."""
    depth: dict[int, int] = {}
    keys: dict[tuple, list] = {}
    for i, b_off, entries, m_off, sep in host_backward:
        p = parent[i]
        depth[i] = depth[p] + 1 if p >= 0 and p in depth else (0 if p < 0 else 1)
        if sep is None:
            continue
        if not isinstance(sep, np.ndarray):
            sep = np.arange(sep, sep + entries // 2, dtype=np.int64)
        keys.setdefault((depth[i], entries, sep.shape), []).append((b_off, m_off, sep))
    return [BackwardGroup(np.array([x[0] for x in rows], np.int64), np.array([x[1] for x in rows], np.int64),
                          np.stack([x[2] for x in rows]))
            for key, rows in sorted(keys.items(), key=lambda kv: kv[0][:2])]


def _inputs(plan: BucketTree, unclamped: list[tuple[int, ...]], offsets: np.ndarray, labelled: frozenset):
    """Clamped tables in the plan's layout: their scopes (latest-eliminated first) and value sources."""
    pos = {int(v): i for i, v in enumerate(plan.order)}
    scopes, src, lab_var, lab_stride, starts = [], [], [], [], []
    n = 1
    for t, scope in enumerate(unclamped):
        k = len(scope)
        strides = [1 << (k - 1 - a) for a in range(k)]
        rem = sorted((a for a in range(k) if scope[a] not in labelled), key=lambda a: -pos[scope[a]])
        lab = [(scope[a], strides[a]) for a in range(k) if scope[a] in labelled]
        scopes.append(tuple(scope[a] for a in rem))
        e = np.arange(2 ** len(rem), dtype=np.int64)
        base = np.full_like(e, offsets[t])
        for j, a in enumerate(rem):
            base += ((e >> (len(rem) - 1 - j)) & 1) * strides[a]
        src.append(base)
        lv = np.full((len(e), 3), -1, np.int64)
        ls = np.zeros((len(e), 3), np.int64)
        for j, (v, st) in enumerate(lab):
            lv[:, j], ls[:, j] = v, st
        lab_var.append(lv)
        lab_stride.append(ls)
        starts.append(n)
        n += len(e)
    return scopes, np.concatenate(src), np.concatenate(lab_var), np.concatenate(lab_stride), starts, n


def build(plan: BucketTree, unclamped: list[tuple[int, ...]], offsets: np.ndarray, labelled: frozenset,
          host_below: int, chunks: tuple[int, ...]) -> Program:
    """Lay out `plan` for a run.

    Args:
        plan: the bucket tree of the tables clamped at the `labelled` variables.
        unclamped: each table's variables before clamping (the binarised model's scopes; at most 3, so the
            label and stride columns have 3).
        offsets: (T,) int64 where each table's log values (row-major over `unclamped[t]`) start in logflat.
        labelled: the labelled variables.
        host_below: buckets with fewer entries run on the host.
        chunks: the device's smallest and largest chunk (`kernels.CHUNKS`, `kernels.chunk_of`).
    """
    scopes, src, lab_var, lab_stride, starts, n_host = _inputs(plan, unclamped, offsets, labelled)
    n = len(plan.order)
    bscopes = plan.scopes
    parent = [int(x) for x in plan.parent]
    ranks = [len(s) for s in bscopes]
    on_device = np.array([2.0 ** r >= host_below for r in ranks], bool)
    for i in range(n):  # ancestors of device buckets run there too (parents come later in the order)
        if on_device[i] and parent[i] >= 0:
            on_device[parent[i]] = True
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        if parent[i] >= 0:
            children[int(parent[i])].append(i)
    constants = np.array([starts[t] for t in plan.constants], dtype=np.int64)

    # Host arena: inputs, then each host bucket's table and message.
    b_off = np.zeros(n, np.int64)
    m_off = np.zeros(n, np.int64)
    for i in np.flatnonzero(~on_device):
        b_off[i] = n_host
        m_off[i] = n_host + 2 ** ranks[i]
        n_host += 2 ** ranks[i] + 2 ** (ranks[i] - 1)

    def table_inputs(i):
        return [(starts[t], scopes[t]) for t in plan.tables[i]]

    host_forward = []
    for i in np.flatnonzero(~on_device):
        r = int(ranks[i])
        ins = table_inputs(i) + [(int(m_off[c]), bscopes[c][:-1]) for c in children[i]]
        gather = np.stack([off + _pext_table(r, _mask(bscopes[i], sc)) for off, sc in ins]) if ins else \
            np.zeros((1, 2**r), np.int64)
        host_forward.append((int(b_off[i]), 2**r, int(m_off[i]), gather))

    # Device arena: [0] zero, download (marginals, outbox), upload, tables and messages, scratch.
    device = np.flatnonzero(on_device)
    dev_row = {int(i): j for j, i in enumerate(device)}
    host_kids = [c for i in device for c in children[i] if not on_device[c]]
    download = 2 * len(device)
    outbox = []
    sep_at = {}
    for c in host_kids:
        entries = 2 ** (ranks[c] - 1)
        sep_at[c] = n_host
        outbox.append((n_host, download, entries))
        download += entries
        n_host += entries
    # A reduce row's last chunk writes up to a chunk past its separator table (padding the next slot
    # overwrites later): a guard of the largest chunk keeps it out of the upload region.
    big = kernels.chunk_of(max([2 ** ranks[i] for i in device], default=1), chunks)[0]  # the largest chunk
    upload_off = 1 + max(kernels.io_size(download), download + big)
    upload: list[np.ndarray] = []
    d_off = np.zeros(n, np.int64)
    d_moff = np.zeros(n, np.int64)
    ins_dev: dict[int, list[tuple[int, tuple]]] = {}
    nu = 0
    for i in device:
        ins = []
        for off, sc in table_inputs(i):
            ins.append((upload_off + nu, sc))
            upload.append(np.arange(off, off + 2 ** len(sc), dtype=np.int64))
            nu += 2 ** len(sc)
        for c in children[i]:
            if not on_device[c]:
                entries = 2 ** (ranks[c] - 1)
                ins.append((upload_off + nu, bscopes[c][:-1]))
                upload.append(np.arange(m_off[c], m_off[c] + entries, dtype=np.int64))
                nu += entries
        ins_dev[int(i)] = ins
    end = upload_off + kernels.io_size(nu) if len(device) else 1
    for i in device:  # each table and message padded to its chunk: kernels write whole chunks
        entries = max(2 ** ranks[i], kernels.chunk_of(2 ** ranks[i], chunks)[0])
        d_off[i] = end
        d_moff[i] = end + entries
        end += entries + entries // 2
    scratch = end
    end += max([2 ** (ranks[i] - 1) for i in device if parent[i] >= 0], default=1)

    rows, calls = [], []

    def add(kind, entries, values):
        row = np.zeros(kernels.WIDTH, np.int64)
        row[:len(values)] = values
        rows.append(row)
        calls.append((kind, *kernels.chunk_of(entries, chunks)))

    for i in device:
        r = int(ranks[i])
        ins = ins_dev[int(i)] + [(int(d_moff[c]), bscopes[c][:-1]) for c in children[i] if on_device[c]]
        groups = [ins[k:k + kernels.K] for k in range(0, max(len(ins), 1), kernels.K)]
        for g, group in enumerate(groups):
            offs = [off for off, _ in group] + [0] * (kernels.K - len(group))
            masks = [_mask(bscopes[i], sc) for _, sc in group] + [0] * (kernels.K - len(group))
            add("forward", 2**r, [r, d_off[i], d_moff[i], int(g > 0), *offs, *masks])

    def reduce_row(c, out):
        p = int(parent[c])
        sepmask = _mask(bscopes[p], bscopes[c][:-1])
        add("reduce", 2 ** ranks[p], [ranks[p], d_off[p], sepmask, ranks[p] - (ranks[c] - 1), out])

    for i in device[::-1]:
        r = int(ranks[i])
        p = parent[i]
        sep_off, sep_mask = scratch, (1 << (r - 1)) - 1
        if p >= 0 and ranks[p] == r - 1:  # the separator is the parent's scope: read its belief
            sep_off, sep_mask = d_off[p], _mask(bscopes[p], bscopes[i][:-1])
        elif p >= 0:
            reduce_row(i, scratch)
        add("belief", 2**r, [r, d_off[i], d_moff[i], sep_off, int(p >= 0), 1 + 2 * dev_row[int(i)], sep_mask])
    for c, (_, dl, _) in zip(host_kids, outbox, strict=True):
        reduce_row(c, 1 + dl)

    host_backward = []
    for i in np.flatnonzero(~on_device)[::-1]:
        p = int(parent[i])
        if p < 0:
            sep = None
        elif on_device[p]:
            sep = sep_at[int(i)]
        else:
            sep = b_off[p] + _separator_table(int(ranks[p]), _mask(bscopes[p], bscopes[i][:-1]))
            if sep.shape[0] == 1:  # the separator is the parent's whole scope: nothing to sum
                sep = sep[0]
        host_backward.append((int(i), int(b_off[i]), 2 ** int(ranks[i]), int(m_off[i]), sep))
    host_marginals = []
    host = np.flatnonzero(~on_device)
    host_ranks = np.array([ranks[i] for i in host], dtype=np.int64)
    for r in np.unique(host_ranks):
        group = host[host_ranks == r]
        host_marginals.append((group, b_off[group][:, None] + np.arange(2**int(r), dtype=np.int64)))
    device_size = 0
    if len(device):
        device_size = int(max(end + big, 1 + kernels.io_size(download),
                              upload_off + kernels.io_size(nu)))
    return Program(plan, src, lab_var, lab_stride, constants, n_host, host_forward, host_backward,
                   host_marginals, device,
                   np.concatenate(upload) if upload else np.zeros(0, np.int64), upload_off,
                   np.array(rows, np.int64).reshape(-1, kernels.WIDTH), calls, int(download), outbox,
                   device_size, group_forward(host_forward, parent, np.flatnonzero(~on_device)),
                   group_backward(host_backward, parent))


__all__ = ["Program", "ForwardGroup", "BackwardGroup", "build", "group_forward", "group_backward"]
