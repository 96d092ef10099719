"""A short seeded fuzz of split (split/fuzz.py; bench/bench_split_fuzz.py runs >= 10,000):
damaged objects and archives through ``split`` and ``split --check`` in children limited
to 30 s and 1 GB; every outcome must be a split, a check's verdict or a one-line refusal."""

import os

import numpy as np
import pytest

from conftest import need_tool

from elflayout.split import fuzz


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    return fuzz.build_bases(tmp_path_factory.mktemp("bases"))


@pytest.mark.slow     # ~30 s of CPU: 200 runs, most with links
def test_short_fuzz_run(tmp_path):
    for tool in ("ld.lld", "ld.gold"):
        need_tool(tool)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    t = fuzz.run(seed=7, count=100, workdir=tmp_path)
    assert t.variants == 100 and t.runs == 200
    assert t.failed == 0, t.failures[:5]
    assert t.split and t.refused                # both outcomes are exercised
    assert len(t.by_kind) >= 10


def test_negative_member_size_is_judged_a_refusal(tmp_path, bases):
    """The archive whose member size reads -60 once made split loop without bound: the
    harness must see a one-line refusal, within its limits."""
    base = next(b for b in bases if b.archive)
    raw = bytearray(base.data)
    pos, _ = fuzz._members(base.data)[0]
    raw[pos + 48:pos + 58] = b"-60".ljust(10)
    src = tmp_path / base.name
    src.write_bytes(raw)
    out = tmp_path / "out"
    r = fuzz.run_cli_limited(["split", str(src), "-o", str(out)], timeout=30)
    t = fuzz.Tally()
    fails = []
    fuzz._judge(t, r, src, out, False, fails.append)
    assert (r.rc, t.refused, fails) == (2, 1, []), r.stderr


def _spin(argv):
    while True:
        pass


@pytest.mark.parametrize("forever", [_spin, lambda argv: __import__("time").sleep(60)], ids=["spins", "waits"])
def test_limits_catch_a_hang(tmp_path, monkeypatch, forever):
    """A run that never ends is stopped at its CPU limit (spinning) or at its wall-time
    backstop (waiting) and counted as a hang."""
    import elflayout.cli

    monkeypatch.setattr(elflayout.cli, "main", forever)
    monkeypatch.setattr(fuzz, "WALL_FACTOR", 3)
    r = fuzz.run_cli_limited(["split"], timeout=1)
    t = fuzz.Tally()
    fails = []
    fuzz._judge(t, r, tmp_path / "x.o", tmp_path / "o", False, fails.append)
    assert r.timed_out and t.hangs == 1 and fails and r.seconds < 20


def test_limits_catch_unbounded_memory(tmp_path, monkeypatch):
    import elflayout.cli

    def grow(argv):
        blocks = []
        while True:
            blocks.append(np.ones(1 << 24, np.uint8))

    monkeypatch.setattr(elflayout.cli, "main", grow)
    r = fuzz.run_cli_limited(["split"], timeout=30, memory=1 << 30)
    assert not r.timed_out and "MemoryError" in r.stderr
    t = fuzz.Tally()
    fuzz._judge(t, r, tmp_path / "x.o", tmp_path / "o", False, lambda m: None)
    assert t.tracebacks == 1


def test_variants_are_reproducible(bases):
    rng1, rng2 = np.random.default_rng([3, 5]), np.random.default_rng([3, 5])
    a = fuzz.damage_archive(next(b for b in bases if b.archive).data, "member-size", rng1)
    b = fuzz.damage_archive(next(b for b in bases if b.archive).data, "member-size", rng2)
    assert a == b


@pytest.mark.parametrize("variant", [487, 645])
def test_other_order_link_of_damaged_input_is_a_refusal(tmp_path, bases, variant):
    """Seed 2's variants 487 and 645: a linker copies a damaged member's fields (a
    relocation entry size, a symbol index) into its output; the other-order comparison
    could not read it and raised a traceback. It must refuse: nothing proved, exit 1."""
    for tool in ("ld.lld", "ld.gold"):
        need_tool(tool)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    t = fuzz.run(seed=2, count=1, start=variant, workdir=tmp_path, bases=bases)
    assert t.failed == 0, t.failures


@pytest.mark.slow     # ~40 runs with cross links
def test_short_fuzz_run_aarch64(tmp_path):
    """Damaged AArch64 objects and archives (cross-compiled bases): no exit 3, no traceback."""
    for tool in ("ld.lld", "ld.gold", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++"):
        need_tool(tool)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    bases = fuzz.build_bases(tmp_path / "b", "aarch64")
    assert all(b.archive or b.data[18] == 183 for b in bases)      # EM_AARCH64
    t = fuzz.run(seed=30, count=20, workdir=tmp_path, bases=bases)
    assert t.variants == 20 and t.failed == 0, t.failures[:5]
    assert t.split


def test_unreadable_original_link_is_not_checked(tmp_path):
    """aarch64 seed 33 variant 433: GNU ld linked a damaged member into an output whose
    .symtab links to section 0, and reading it raised (exit 3). Nothing proved: exit 1."""
    for tool in ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-ld"):
        need_tool(tool)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    bases = fuzz.build_bases(tmp_path / "b", "aarch64")
    t = fuzz.run(seed=33, count=1, start=433, workdir=tmp_path, bases=bases)
    assert t.failed == 0, t.failures
