"""Put back into a profile the code native runs touched and the profile never recorded.

A valgrind profile records what ran under valgrind. Native runs differ a little (the
garbage collector's passes move with hash randomisation; an environment or stdio
condition the profile did not share), and in a build ordered from the profile every
function it lacks sits in the cold part, where its first touch faults and costs a whole
read-around window (read_ahead_kb) for a few hundred bytes of code.

``add_faulted`` takes a page-granular profile (``profile --backend trace``) of such an
ordered build, run as it will be measured or used, finds the code pages that faulted
outside the profile's functions, and appends every function on those pages to the
profile, after everything it had (the trace cannot tell which function of a page ran;
taking the page's neighbours costs their size, a fault costs a window). Repeat with a
trace of the relinked build until no code page faults outside the ordered region: pages
a window had already brought in fault only once their window no longer does.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import numpy as np

from elflayout import linkmap
from elflayout import symbols
from elflayout.elfcore import PAGE, ElfImage
from elflayout.errors import ElflayoutError
from elflayout.profile.merge import KEYS
from elflayout.profile.model import Function, Profile, Target, new_profile


@dataclass
class Feedback:
    cold_pages: list[int] = field(default_factory=list)  # faulted code pages of the traced build, outside the profile
    added: list[str] = field(default_factory=list)  # function names appended to the profile
    unmatched: list[str] = field(default_factory=list)  # names on those pages the profiled build lacks


def _functions(path: str):
    with ElfImage(path) as img:
        return symbols.functions(img)


def add_faulted(profile: Profile, trace: Profile) -> tuple[dict, Feedback]:
    """The profile document with the functions on the trace's cold faulted code pages
    appended to its (first) target, and what was done. The trace's target must be a
    build of the same code (function names) ordered from ``profile``."""
    if not profile.targets or not trace.targets:
        raise ElflayoutError("feedback: a profile without targets")
    if trace.metadata.get("backend") != "trace":
        raise ElflayoutError(f"{trace.source}: not a --backend trace profile (it records no page faults)")
    t, tt = profile.targets[0], trace.targets[0]
    traced = _functions(tt.path)
    have = {f.name for f in t.functions}
    hot = np.zeros(0, dtype=np.int64)
    idx = [i for i, n in enumerate(traced.names) if n in have]
    if idx:
        a, s = traced.offset[idx], np.maximum(traced.size[idx], 1)
        hot = np.unique(np.concatenate([np.arange(x // PAGE, (x + n - 1) // PAGE + 1) for x, n in zip(a, s)]))
    fb = Feedback()
    names: dict[str, None] = {}  # an ordered set: first faulted page first
    for p in sorted({p.page for p in tt.pages if p.kind == "t"}):
        lo, hi = p * PAGE, (p + 1) * PAGE
        on = np.flatnonzero((traced.offset < hi) & (traced.offset + traced.size > lo))
        if not on.size or p in hot:
            continue
        fb.cold_pages.append(p)
        names.update((traced.names[i], None) for i in on if traced.names[i] not in have)
    base = _functions(t.path)
    by_name: dict[str, list[int]] = {}
    for i, n in enumerate(base.names):
        by_name.setdefault(n, []).append(i)
    lm = _linkmap(t)
    nxt = 1 + max((e.first for k in ("functions", "sections", "objects", "pages") for e in getattr(t, k)), default=-1)
    nw = len(profile.workloads)
    new = []
    for n in names:
        hits = by_name.get(n)
        if not hits:
            fb.unmatched.append(n)
            continue
        for i in hits:  # a static name several objects define: every copy (the trace cannot tell)
            off, size = int(base.offset[i]), int(base.size[i])
            sec = out = obj = None
            if lm is not None:
                k = int(lm.lookup_offsets([off])[0])
                if k >= 0:
                    sec, out, obj = lm.name[k], lm.output[k], lm.object[k]
            new.append(Function(name=n, first=nxt + len(new), offset=off, size=size, section=sec, output_section=out,
                                object=obj, source="trace feedback", ranks=[None] * nw + [1.0] if nw else None))
        fb.added.append(n)
    targets = []
    for k, tg in enumerate(profile.targets):
        if nw:  # one more workload: the traced run, which touched only the added functions
            tg = _extend_ranks(tg)
        if k == 0:
            tg = dataclasses.replace(tg, functions=[*tg.functions, *new])
        targets.append(tg.to_dict())
    meta = dict(profile.metadata)
    meta["notes"] = [*meta.get("notes", []), f"{len(fb.added)} functions on {len(fb.cold_pages)} code pages that "
                     f"faulted natively outside the profile appended (trace {trace.source})"]
    if nw:
        meta["workloads"] = [*profile.workloads, {"name": "native faults (trace feedback)",
                                                  "argv": trace.metadata.get("argv"), "backend": "trace"}]
    return new_profile(meta, targets), fb


def _extend_ranks(t: Target) -> Target:
    return dataclasses.replace(t, **{k: [dataclasses.replace(e, ranks=[*(e.ranks or []), None])
                                         for e in getattr(t, k)] for k in KEYS})


def _linkmap(t: Target):
    """The profiled build's link map (objects and input sections of the added functions)."""
    if not t.map or not os.path.exists(t.map) or not os.path.exists(t.path):
        return None
    with ElfImage(t.path) as img:
        return linkmap.parse(t.map, img)
