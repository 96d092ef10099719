"""The screen result file (``elflayout-screen`` v1, docs/formats.md): build, parse, load.

``elflayout screen`` writes it (``build``); ``elflayout report`` and anything else that
reads one goes through ``parse``/``load``, which check it once and give one-line errors
naming the file. ``Screen.doc`` is the document as read, for code that renders it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from elflayout import fileio
from elflayout.errors import ElflayoutError

KIND = "screen"
VERSION = 1
VERSIONS = (1,)


@dataclass(frozen=True)
class Factor:
    """A set-up factor with its two levels (coded -1 and +1)."""

    name: str
    low: str
    high: str

    def level(self, coded) -> str:
        return self.high if coded > 0 else self.low


@dataclass(frozen=True)
class Effect:
    """One term's change from LOW to HIGH with its 95% interval (relative when log_scale)."""

    term: str
    effect: float
    ci_low: float
    ci_high: float
    p: float
    significant: bool


@dataclass(frozen=True)
class Fit:
    """The effects on one response (metric, state); none when there was nothing to fit."""

    metric: str
    state: str
    n: int
    log_scale: bool
    effects: tuple[Effect, ...]
    se: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Screen:
    metadata: dict
    factors: tuple[Factor, ...]
    design: dict  # kind, points, resolution, generators, interactions, matrix (rows of -1/+1)
    runs: list[dict]  # measure runs, each with its design "point", "replicate" and "session"
    fits: tuple[Fit, ...]
    doc: dict


def point_name(i: int) -> str:
    return f"p{i:02d}"


def build(metadata: dict, factors: list[Factor], design: dict, order: list[tuple[int, int]], runs: list[dict],
          fits: list[dict]) -> dict:
    """The document ``elflayout screen`` writes (``design`` includes its ``matrix``)."""
    return fileio.envelope(KIND, VERSION, metadata, factors=[vars(f) for f in factors], design=design,
                           order=[{"replicate": r, "point": p} for r, p in order], runs=runs, effects=fits)


def _check(doc: dict, bad) -> None:
    factors, design = doc.get("factors"), doc.get("design")
    if not isinstance(factors, list) or not factors or not all(
            isinstance(f, dict) and {"name", "low", "high"} <= set(f) for f in factors):
        bad("'factors' must be a list of {name, low, high}")
    if not isinstance(design, dict) or not (design.get("kind") == "full" or "fraction" in str(design.get("kind"))):
        bad("'design.kind' must be 'full' or a fraction")
    x = design.get("matrix")
    if not isinstance(x, list) or not x or not all(
            isinstance(r, list) and len(r) == len(factors) and all(c in (-1, 1) for c in r) for r in x):
        bad(f"'design.matrix' must be rows of {len(factors)} levels, each -1 or +1")
    runs = doc.get("runs")
    if not isinstance(runs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("point"), int) and 0 <= r["point"] < len(x)
            and isinstance(r.get("state"), str) for r in runs):
        bad("'runs' must be runs with a design 'point' and a 'state'")
    effects = doc.get("effects")
    if not isinstance(effects, list) or not all(
            isinstance(a, dict) and {"metric", "state", "n", "log_scale"} <= set(a) and isinstance(a.get("effects"), list)
            and all(isinstance(e, dict) and {"term", "effect", "ci_low", "ci_high", "p", "significant"} <= set(e)
                    for e in a["effects"]) for a in effects):
        bad("'effects' must be fits of {metric, state, n, log_scale, effects: [{term, effect, ci_low, ci_high, p, "
            "significant}]}")
    md = doc.get("metadata")
    if not isinstance(md, dict) or not isinstance(md.get("command"), str) or not isinstance(md.get("states"), list):
        bad("'metadata' must name the 'command' and its 'states'")


def parse(doc: dict, src: str | os.PathLike) -> Screen:
    """A screen document (format and version already checked), checked: one-line errors."""
    def bad(what):
        raise ElflayoutError(f"{src}: not a valid screen result: {what}")

    _check(doc, bad)
    fits = tuple(Fit(a["metric"], a["state"], a["n"], a["log_scale"],
                     tuple(Effect(e["term"], e["effect"], e["ci_low"], e["ci_high"], e["p"], e["significant"])
                           for e in a["effects"]), a.get("se"), a.get("note")) for a in doc["effects"])
    return Screen(doc["metadata"], tuple(Factor(f["name"], f["low"], f["high"]) for f in doc["factors"]),
                  doc["design"], doc["runs"], fits, doc)


def load(path: str | os.PathLike) -> Screen:
    return parse(fileio.load_json(path, KIND, VERSIONS), str(path))
