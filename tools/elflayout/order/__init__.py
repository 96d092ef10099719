"""Ordering: profile → object order / lld / gold / GNU ld script; link, check, simulate.

Modules: ``pipeline`` (the one ordering pipeline ``order``, ``link``, the demo and the
benchmarks run), ``profile_input`` (load and select a profile target), ``algorithms``
(one file per layout algorithm), ``resolve`` (profile names → link names), ``formats``
(writers), ``check`` (how well a library honours a profile), ``readahead`` (page-cache
model), ``placement`` (a profile's touches on a build, the profiled one or another),
``simulation`` (the ``simulate`` result format).
"""
