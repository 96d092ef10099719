"""Slow-storage emulation: serve a directory through FUSE with an HDD/eMMC/SSD/cloud model.

Public API (used by ``elflayout measure --storage``)::

    from elflayout.storage import SlowStorage, PRESETS, resolve
    with SlowStorage(src_dir, preset="hdd", read_ahead_kb=128, seek_ms=10) as mnt:
        mnt.path, mnt.info(), mnt.stats()

See docs/storage.md.
"""

from elflayout.storage.model import PRESETS, DeviceModel, resolve
from elflayout.storage.mount import SlowStorage

__all__ = ["SlowStorage", "DeviceModel", "PRESETS", "resolve"]
