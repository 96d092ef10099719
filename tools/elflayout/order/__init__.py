"""Ordering: profile → object order / lld / gold / GNU ld script; link, check, simulate.

Modules: ``profile_input`` (load and select a profile target), ``algorithms`` (one file
per layout algorithm), ``resolve`` (profile names → link names), ``formats`` (writers),
``check`` (how well a library honours a profile), ``readahead`` (page-cache model).
"""
