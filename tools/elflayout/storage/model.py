"""The emulated device: parameters, presets and the latency of a request sequence.

One queue, one request at a time (as a disk head)::

    latency   = seek(d) + size / bandwidth
    d         = offset - end of the previous request, same file (another file: far)
    seek(d)   = 0                                  d == 0        (sequential)
              = min(d / bandwidth, seekfn(d))      d > 0         (a short forward gap is
                                                                  cheaper to read through)
              = seekfn(|d|)                        d < 0, other file, first request
    seekfn(x) = short_seek + (seek - short_seek) * min(1, sqrt(x / seek_span))

``seek`` is the average (far) seek; ``short_seek`` the cheapest non-sequential one; the
square root is the classic arm-acceleration shape of short seeks. Flash presets have
``short_seek == seek`` (no distance dependence). The helper ``tools/slowfs/slowfs.c``
implements the same formula; :meth:`DeviceModel.latencies` is the reference used by the
tests and the benchmark to check it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from elflayout.errors import ElflayoutError

MB = 1_000_000  # bandwidth unit: MB/s = 10^6 bytes per second (as disk vendors quote)
MIB = 1 << 20  # seek span unit


@dataclass(frozen=True)
class DeviceModel:
    seek_ms: float = 0.0  # average (far) seek, ms
    short_seek_ms: float = 0.0  # shortest non-sequential seek, ms (<= seek_ms)
    seek_span_mb: float = 0.0  # distance (MiB) from which a seek costs seek_ms; 0: any distance
    bandwidth_mb_s: float = 0.0  # transfer rate, 10^6 B/s; 0: infinite

    def __post_init__(self):
        for k, v in asdict(self).items():
            if not (isinstance(v, (int, float)) and v >= 0 and v != float("inf")):
                raise ElflayoutError(f"storage: {k} must be a number >= 0, got {v!r}")
        if self.short_seek_ms > self.seek_ms:
            raise ElflayoutError(
                f"storage: short_seek_ms ({self.short_seek_ms}) must not exceed seek_ms ({self.seek_ms})")

    def params(self) -> dict:
        return asdict(self)

    def helper_args(self) -> list[str]:
        """Command-line options of tools/slowfs/slowfs for this model."""
        return ["--seek-ms", repr(float(self.seek_ms)), "--short-seek-ms", repr(float(self.short_seek_ms)),
                "--seek-span-mb", repr(float(self.seek_span_mb)), "--bandwidth-mb-s", repr(float(self.bandwidth_mb_s))]

    def seek_s(self, distance) -> np.ndarray:
        """seekfn(distance in bytes) in seconds (vectorised; inf = far)."""
        d = np.asarray(distance, dtype=float)
        seek, short = self.seek_ms / 1e3, self.short_seek_ms / 1e3
        if self.seek_span_mb <= 0:
            return np.full(d.shape, seek)
        frac = np.minimum(1.0, np.sqrt(np.minimum(d, 1e300) / (self.seek_span_mb * MIB)))
        return short + (seek - short) * frac

    def latencies(self, ino, offset, size) -> np.ndarray:
        """Modelled service time (s) of each request of a sequence (arrays of equal length).

        ``size`` is the number of bytes returned (a read at end of file returns fewer).
        """
        ino = np.asarray(ino, dtype=np.uint64)
        off = np.asarray(offset, dtype=np.int64)
        size = np.asarray(size, dtype=np.int64)
        n = len(off)
        bw = self.bandwidth_mb_s * MB
        if n == 0:
            return np.zeros(0)
        prev_ino = np.r_[np.uint64(0), ino[:-1]]
        prev_end = np.r_[0, (off + size)[:-1]]
        same = (ino == prev_ino) & (np.arange(n) > 0)
        d = off - prev_end
        far = self.seek_s(np.where(same, np.abs(d), np.inf))
        through = d / bw if bw > 0 else np.zeros(n)
        seek = np.where(~same, self.seek_ms / 1e3,
                        np.where(d == 0, 0.0, np.where(d > 0, np.minimum(through, far), far)))
        return seek + (size / bw if bw > 0 else 0.0)

    def describe(self) -> str:
        bw = f"{self.bandwidth_mb_s:g} MB/s" if self.bandwidth_mb_s else "infinite bandwidth"
        if self.seek_ms == 0:
            return f"no seek cost, {bw}"
        if self.seek_span_mb and self.short_seek_ms != self.seek_ms:
            return (f"seek {self.short_seek_ms:g}..{self.seek_ms:g} ms (full from {self.seek_span_mb:g} MiB), {bw}")
        return f"seek {self.seek_ms:g} ms, {bw}"


# Why these values: typical datasheet figures for each class of device.
PRESETS: dict[str, tuple[DeviceModel, str]] = {
    # 7200 rpm laptop/desktop disk: half a rotation (4.2 ms) even for a short hop, ~8 ms
    # average seek; the span is shrunk from a platter's so that jumps inside one large
    # library cost what "average seek" promises.
    "hdd": (DeviceModel(seek_ms=8.0, short_seek_ms=4.0, seek_span_mb=64.0, bandwidth_mb_s=120.0),
            "7200 rpm hard disk"),
    # Phone/SBC eMMC 5.x: ~0.4 ms random read access, ~150 MB/s sequential.
    "emmc": (DeviceModel(seek_ms=0.4, short_seek_ms=0.4, bandwidth_mb_s=150.0), "eMMC flash"),
    # SATA SSD: ~0.1 ms random 4 KiB read at queue depth 1, ~500 MB/s (SATA III limit).
    "sata-ssd": (DeviceModel(seek_ms=0.1, short_seek_ms=0.1, bandwidth_mb_s=500.0), "SATA SSD"),
    # Network block volume (EBS/PD class): ~1 ms per random request, ~250 MB/s.
    "cloud": (DeviceModel(seek_ms=1.0, short_seek_ms=1.0, bandwidth_mb_s=250.0), "cloud block volume"),
    # Pure passthrough: only the FUSE round trip (the baseline of the others).
    "none": (DeviceModel(), "no added delay (FUSE overhead only)"),
}


def resolve(preset: str = "none", **overrides) -> DeviceModel:
    """The preset's model with some parameters replaced (None values are ignored)."""
    if preset not in PRESETS:
        raise ElflayoutError(f"storage: unknown preset {preset!r} (one of: {', '.join(PRESETS)})")
    base = PRESETS[preset][0].params()
    bad = set(overrides) - set(base)
    if bad:
        raise ElflayoutError(f"storage: unknown parameter(s) {', '.join(sorted(bad))} (known: {', '.join(base)})")
    over = {k: float(v) for k, v in overrides.items() if v is not None}
    # Raising seek_ms alone on a flash preset keeps it distance-independent.
    if "seek_ms" in over and "short_seek_ms" not in over:
        if base["short_seek_ms"] == base["seek_ms"]:
            over["short_seek_ms"] = over["seek_ms"]
        else:
            over["short_seek_ms"] = min(base["short_seek_ms"], over["seek_ms"])
    base.update(over)
    return DeviceModel(**base)
