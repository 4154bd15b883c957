"""MIG layouts: a host's ``gpu_mig_layout`` resolved against its profile's GPU-instance profiles
and refused, in one line, when no GPU could hold it.

A layout is written one of three ways:

- ``disabled``: MIG off on every GPU (``all-disabled`` reads the same);
- ``all-<profile>``: every GPU split into as many instances of that profile as it holds
  (``all-1g.10gb``: seven on an H100 80GB);
- a mapping of ``all`` and/or GPU indices to ``disabled`` or a list of instance profiles
  (``{all: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb], 7: disabled}``); an index overrides ``all``,
  and a GPU the mapping does not name keeps MIG off.

The plan hands the roles one entry per GPU: None (MIG off) or the instance profiles in the
order they are created: largest first, so the small profiles, which have the most placements,
come last (the driver picks each instance's placement itself; an order it cannot fit fails
on the node, naming the GPU, with nvidia-smi's words). Whether a list fits one GPU at all is
decided here by the driver's rule: every instance needs a free run of memory slices starting
at one of its profile's placements (``nvidia-smi mig -lgipp``), no profile may exceed its
instance count, and the slices add up to at most 7 compute and 8 memory slices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from provisioner.errors import InputError
from provisioner.profiles import MIG_MEMORY_SLOTS, MigProfile, Profile

DISABLED = ("disabled", "all-disabled")

# One GPU's planned layout: None is MIG off, a tuple the instance profiles (maybe none).
GpuLayout = tuple[str, ...] | None


def resolve(raw: Any, profile: Profile) -> tuple[GpuLayout, ...] | None:
    """The per-GPU layout ``raw`` (a host's gpu_mig_layout) asks for on ``profile``'s GPUs, or
    None when ``raw`` is None (the host's MIG state is not managed). Raises ValueError with the
    reason, without the host (the caller names it)."""
    if raw is None:
        return None
    if not profile.mig_profiles:
        raise ValueError(f"profile {profile.name} lists no MIG instance profiles (mig_profiles): "
                         f"{profile.gpu_model} has no MIG, or its table is not known here")
    table = {mig.name: mig for mig in profile.mig_profiles}
    count = profile.gpu_count
    if isinstance(raw, str):
        return tuple(_named(raw.strip(), table) for _ in range(count))
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError("expected 'disabled', 'all-<profile>' or a mapping of 'all' and GPU "
                         f"indices to lists of instance profiles, found {type(raw).__name__}")
    per_gpu: list[GpuLayout] = [None] * count
    if "all" in raw:
        per_gpu = [_entry(raw["all"], "all", table)] * count
    for key, value in raw.items():
        if key == "all":
            continue
        index = _gpu_index(key, count)
        per_gpu[index] = _entry(value, f"GPU {index}", table)
    return tuple(per_gpu)


def _named(name: str, table: Mapping[str, MigProfile]) -> GpuLayout:
    if name in DISABLED:
        return None
    if name.startswith("all-") and name[4:] in table:
        mig = table[name[4:]]
        return (mig.name,) * mig.instances
    raise ValueError(f"unknown layout {name!r}; use 'disabled', one of "
                     f"{', '.join('all-' + n for n in table)}, or a mapping of GPUs to lists")


def _gpu_index(key: Any, count: int) -> int:
    text = str(key).strip()
    if not text.isdigit() or int(text) >= count:
        raise ValueError(f"key {key!r} is neither 'all' nor a GPU index 0-{count - 1}")
    return int(text)


def _entry(value: Any, where: str, table: Mapping[str, MigProfile]) -> GpuLayout:
    if isinstance(value, str) and value.strip() in DISABLED:
        return None
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ValueError(f"{where}: expected 'disabled' or a list of instance profiles, found "
                         f"{value!r}")
    names = [str(item).strip() for item in value]
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"{where}: {unknown[0]!r} is not an instance profile of this GPU; "
                         f"choose from {', '.join(table)}")
    migs = sorted((table[n] for n in names), key=lambda m: (-m.memory_slices, -m.slices, m.id))
    for name, n in Counter(names).items():
        if n > table[name].instances:
            raise ValueError(f"{where}: {n} x {name}, but one GPU holds at most "
                             f"{table[name].instances}")
    used = sum(m.memory_slices for m in migs)
    if used > MIG_MEMORY_SLOTS:
        raise ValueError(f"{where}: {', '.join(names)} need {used} memory slices, one GPU has "
                         f"{MIG_MEMORY_SLOTS}")
    compute = sum(m.slices for m in migs)
    if compute > 7:
        raise ValueError(f"{where}: {', '.join(names)} need {compute} compute slices, one GPU "
                         "has 7")
    if pack(migs) is None:
        raise ValueError(f"{where}: {', '.join(names)} cannot be placed together on one GPU "
                         "(no free placement for each, nvidia-smi mig -lgipp)")
    return tuple(m.name for m in migs)


def pack(migs: Sequence[MigProfile]) -> list[int] | None:
    """A start slot for each instance (in order) such that none overlap, or None."""
    free = [True] * MIG_MEMORY_SLOTS

    def place(i: int, starts: list[int]) -> list[int] | None:
        if i == len(migs):
            return starts
        mig = migs[i]
        for start in mig.placements:
            span = range(start, start + mig.memory_slices)
            if all(free[s] for s in span):
                for s in span:
                    free[s] = False
                found = place(i + 1, [*starts, start])
                for s in span:
                    free[s] = True
                if found is not None:
                    return found
        return None

    return place(0, [])


def resolve_host(where: str, name: str, raw: Any, profile: Profile) -> tuple[GpuLayout, ...] | None:
    """``resolve`` with its refusal as one InputError line naming the host."""
    try:
        return resolve(raw, profile)
    except ValueError as exc:
        raise InputError(f"{where}: host {name}: gpu_mig_layout: {exc}") from None


def as_vars(layout: Sequence[GpuLayout]) -> list[list[str] | None]:
    """The layout as the roles read it (JSON lists)."""
    return [None if gpu is None else list(gpu) for gpu in layout]
