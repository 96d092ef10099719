"""Page arithmetic shared by every stage: folios to pages, and what counts as a seek.

One definition each, so the harness (``measure``), the report and the readahead model
count the same thing.
"""

from __future__ import annotations

import numpy as np

from elflayout.elfcore import PAGE  # noqa: F401 - re-exported: one page size

# A jump of more than this many pages between the end of one read and the start of the
# next counts as a seek: 32 pages = 128 KiB, the read-ahead window the harness sets by
# default, so anything read-ahead could have bridged is not a seek.
SEEK_PAGES = 32


def count_seeks(page: np.ndarray, npages: np.ndarray, gap: int = SEEK_PAGES) -> int:
    """Jumps of more than ``gap`` pages between consecutive reads (in time order), in
    either direction."""
    page, npages = np.asarray(page), np.asarray(npages)
    if page.size < 2:
        return 0
    jump = page[1:] - (page[:-1] + npages[:-1])
    return int(np.count_nonzero(np.abs(jump) > gap))


def expand(page: np.ndarray, npages: np.ndarray) -> np.ndarray:
    """Every page of the extents [page, page + npages) (folios, runs), in order."""
    page = np.asarray(page, dtype=np.int64)
    npages = np.asarray(npages, dtype=np.int64)
    if not npages.size:
        return np.zeros(0, dtype=np.int64)
    starts = np.repeat(page, npages)
    within = np.arange(starts.size) - np.repeat(np.cumsum(npages) - npages, npages)
    return starts + within


def extent_index(npages: np.ndarray) -> np.ndarray:
    """For ``expand``'s output: the index of the extent each page came from."""
    npages = np.asarray(npages, dtype=np.int64)
    return np.repeat(np.arange(npages.size), npages)
