"""Split objects and archives: read every input, plan and write in memory, then write
all outputs atomically (a bad input stops everything before anything is written)."""

from __future__ import annotations

import contextlib
import os
from collections import Counter
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_output, read_input
from elflayout.split import archive
from elflayout.split.extents import SPLIT_PREFIX
from elflayout.split.plan import make_plan
from elflayout.split.reader import read_object
from elflayout.split.writer import write


@dataclass
class Glued:
    first: str
    last: str
    reason: str
    rule: str = "neighbours"        # which kind of rule kept them together (see docs/splitting.md)


@dataclass
class SectionReport:
    name: str
    units: int                      # functions / data objects found
    sections: int                   # sections written for them
    new_relocations: int            # references the assembler had resolved, now relocations
    kept_whole: str | None = None
    glued: list[Glued] = field(default_factory=list)


@dataclass
class ObjectReport:
    name: str
    changed: bool
    reason: str | None = None       # why unchanged
    sections: list[SectionReport] = field(default_factory=list)
    dwo: str | None = None          # a .dwo written again for the split object (-gsplit-dwarf)


@dataclass
class InputReport:
    path: str
    output: str
    archive: bool
    objects: list[ObjectReport]


def split_object(raw: bytes, name: str, dwo_out: str | None = None) -> tuple[bytes, ObjectReport]:
    """Split one relocatable object; returns the new bytes (``raw`` itself when nothing
    is split) and what was done. ``dwo_out``: where the ``.dwo`` of a ``-gsplit-dwarf``
    object may be written again (its absolute path goes into the object); the report's
    ``dwo`` then names it and ``dwo_data`` (not reported) holds its bytes."""
    obj = read_object(raw, name)
    obj.dwo_out = str(Path(dwo_out).absolute()) if dwo_out else None
    plan = make_plan(obj)
    secs = []
    for sp in plan.sections.values():
        new = sum(1 for nr in sp.new_relocs
                  if _grp(sp, sp.unit_at(nr.field)) != _grp(sp, nr.target_unit)) if len(sp.groups) > 1 else 0
        glued = [Glued(sp.units[a].name, sp.units[b].name, why, rule) for a, b, why, rule in sp.reasons]
        secs.append(SectionReport(sp.sec.name, len(sp.units), len(sp.groups), new, sp.whole,
                                  [] if sp.whole else glued))
    if plan.unchanged:
        return raw, ObjectReport(name, False, plan.unchanged, secs)
    try:
        out = write(plan)
    except ValueError as e:
        return raw, ObjectReport(name, False, f"kept as it is: {e}", secs)
    # The result must parse as what it claims to be before anything is written.
    read_object(out, f"{name} (split)")
    rep = ObjectReport(name, True, None, secs)
    if plan.dwo_file is not None:
        rep.dwo, rep.dwo_data = plan.dwo_file
    return out, rep


def _grp(sp, unit):
    from elflayout.split.writer import _group_of
    return _group_of(sp, unit)


def split_inputs(inputs: list[str | os.PathLike], outdir: str | os.PathLike, *, force: bool = False,
                 progress: Callable[[str], None] | None = None,
                 verify: Callable[[list[Path], list[Path]], object] | None = None,
                 dwo_dir: str | os.PathLike | None = None) -> list[InputReport]:
    """Split every input (objects and ``.a`` archives, members kept in order) into
    ``outdir/<same name>``. Raises ``ElflayoutError`` on bad input, before writing.
    ``verify(originals, staged outputs)`` runs before the outputs are put in place; if it
    raises, nothing is written. New ``.dwo`` files go to ``dwo_dir`` (default ``outdir``)."""
    planned = plan_inputs(inputs, outdir, force=force, progress=progress, dwo_dir=dwo_dir)
    write_outputs(planned, outdir, progress=progress, verify=verify)
    return [rep for rep, _ in planned]


def plan_inputs(inputs: list[str | os.PathLike], outdir: str | os.PathLike, *, force: bool = False,
                progress: Callable[[str], None] | None = None,
                dwo_dir: str | os.PathLike | None = None) -> list[tuple[InputReport, object]]:
    """Read and split every input in memory: ``(report, new bytes)`` per input (for an
    archive, its members' ``(name, bytes)``). Nothing is written; bad input raises
    ``ElflayoutError``."""
    outdir = Path(outdir)
    names = [Path(p).name for p in inputs]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ElflayoutError(f"two inputs named {sorted(dup)[0]}: their outputs would collide in {outdir}")
    if outdir.exists() and not outdir.is_dir():
        raise ElflayoutError(f"{outdir}: exists and is not a directory")
    dwo_dir = outdir if dwo_dir is None else Path(dwo_dir)
    results = []
    for k, p in enumerate(inputs):
        p = Path(p)
        if progress:
            progress(f"[{k + 1}/{len(inputs)}] {p}")
        raw = read_input(p, "an object file or archive")
        out = outdir / p.name
        if out.exists() and os.path.samefile(out, p):
            raise ElflayoutError(f"{out}: output would overwrite the input")
        if out.exists() and not force:
            raise ElflayoutError(f"{out}: output exists (use --force to replace it)")
        if archive.is_archive(raw):
            members = archive.read_archive(raw, str(p))
            if not members:
                raise ElflayoutError(f"{p}: archive has no members")
            new, reps = [], []
            for mname, body in members:
                b, rep = split_object(body, f"{p}({mname})", dwo_dir / f"{p.name}.{Path(mname).stem}.dwo")
                new.append((mname, b))
                reps.append(rep)
            results.append((InputReport(str(p), str(out), True, reps), new))
        else:
            b, rep = split_object(raw, str(p), dwo_dir / (p.stem + ".dwo"))
            if rep.dwo and Path(rep.dwo).exists() and not force:
                raise ElflayoutError(f"{rep.dwo}: output exists (use --force to replace it)")
            results.append((InputReport(str(p), str(out), False, [rep]), b))
    dwos = [o.dwo for r, _ in results for o in r.objects if o.dwo]
    if len(set(dwos)) != len(dwos):
        raise ElflayoutError(f"two split objects would write {sorted(d for d in dwos if dwos.count(d) > 1)[0]}")
    return results


def write_outputs(planned: list[tuple[InputReport, object]], outdir: str | os.PathLike, *,
                  progress: Callable[[str], None] | None = None,
                  verify: Callable[[list[Path], list[Path]], object] | None = None) -> None:
    """Stage every output of ``plan_inputs`` in ``outdir``, run ``verify(originals,
    staged)`` if given, then put them in place; if anything raises, nothing is written."""
    outdir = Path(outdir)
    created = not outdir.exists()
    outdir.mkdir(parents=True, exist_ok=True)
    try:
        _stage_verify_replace(planned, outdir, progress, verify)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                outdir.rmdir()      # only if still empty: the directory was ours
        raise


def _stage_verify_replace(planned, outdir: Path, progress, verify) -> None:
    with tempfile.TemporaryDirectory(prefix=".elflayout-split-", dir=outdir) as stage:
        staged = []
        for rep, data in planned:
            tmp = Path(stage) / Path(rep.output).name
            if rep.archive:
                archive.write_archive(tmp, data)
            else:
                tmp.write_bytes(data)
            staged.append(tmp)
        # (.dwo files first: the split objects name them where they go, also for the check)
        dwos = [o for r, _ in planned for o in r.objects if o.dwo]
        try:
            for o in dwos:
                Path(o.dwo).parent.mkdir(parents=True, exist_ok=True)
                with atomic_output(o.dwo) as dst:
                    Path(dst).write_bytes(o.dwo_data)
            if verify is not None:
                if progress:
                    progress("check: linking originals and split objects in original order")
                verify([Path(r.path) for r, _ in planned], staged)
        except BaseException:
            for o in dwos:
                with contextlib.suppress(OSError):
                    os.unlink(o.dwo)
            raise
        for (rep, _), tmp in zip(planned, staged):
            with atomic_output(rep.output) as dst:
                os.replace(tmp, dst)


def summary(reports: list[InputReport]) -> dict:
    """Totals over all inputs: objects changed, units, sections, kept whole, glued."""
    objs = [o for r in reports for o in r.objects]
    secs = [s for o in objs for s in o.sections]
    return {
        "inputs": len(reports), "objects": len(objs), "objects_split": sum(o.changed for o in objs),
        "units": sum(s.units for s in secs), "sections": sum(s.sections for s in secs),
        "new_relocations": sum(s.new_relocations for s in secs),
        "sections_kept_whole": sum(1 for s in secs if s.kept_whole),
        "glued": sum(len(s.glued) for s in secs),
        "glued_by_rule": dict(sorted(Counter(g.rule for s in secs for g in s.glued).items())),
    }


def kept_whole(reports: list[InputReport]) -> list[tuple[str, str, list[str]]]:
    """Sections split had to keep whole, grouped: ``(section name, reason, objects)``,
    in input order. These are refusals a user must see, not details."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in reports:
        for o in r.objects:
            for s in o.sections:
                if s.kept_whole:
                    groups.setdefault((s.name, s.kept_whole), []).append(o.name)
    return [(name, why, objs) for (name, why), objs in groups.items()]


def nothing_split(reports: list[InputReport]) -> str | None:
    """Why no function got a section of its own although sections had to stay whole
    (an ordering could then move nothing the inputs did not already allow), else None.
    A lone data object renamed .rodata.<name> does not count as a split."""
    for r in reports:
        for o in r.objects:
            if o.changed and any(s.name.startswith(".text") and s.kept_whole is None and (s.sections > 1 or s.units == 1)
                                 for s in o.sections):
                return None
    whole = kept_whole(reports)
    if not whole:
        return None
    name, why, objs = max(whole, key=lambda g: len(g[2]))
    n = sum(len(g[2]) for g in whole)
    return (f"nothing split: no function got a section of its own, {n} section{'s' if n != 1 else ''} had to "
            f"stay whole (e.g. {name} of {len(objs)} object{'s' if len(objs) != 1 else ''}: {why}); nothing written")


def to_json(reports: list[InputReport]) -> list[dict]:
    return [asdict(r) for r in reports]


__all__ = ["split_object", "split_inputs", "plan_inputs", "write_outputs", "summary", "kept_whole", "nothing_split",
           "to_json", "SPLIT_PREFIX"]
