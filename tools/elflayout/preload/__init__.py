"""Startup preload plans for binaries nobody can relink.

The layout of a distribution's library is fixed, but the order and size of the reads a
startup makes are not: read the pages it will need in file-offset order, in few large
requests, before the program faults them in one read-around window at a time.

Modules: ``inputs`` (pages read per file from profiles and measure results), ``plan``
(the planning algorithm), ``model`` (the ``elflayout-preload-plan`` format, JSON and
the text form the C preloader reads), ``runner`` (the C launcher and library in
``build/preload``: paths, build, commands). The ``cli`` module prints.
"""
