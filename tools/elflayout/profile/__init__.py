"""Profiling: the first-access order of a target library's code and data at startup.

Backends (``valgrind.py``: our valgrind tool ``firsttouch``; ``trace.py``: kernel page-cache
tracepoints) produce raw events; ``attribute.py`` turns them into functions, sections,
objects and pages; ``model.py`` reads and writes the profile format v1
(docs/formats/profile.md); ``merge.py`` combines profiles.
"""
