"""Measurement harness: cold / selectively-cold / hot startup, pages read per file.

Modules by concern (pyperf's split): ``controls`` (system operations that can show,
apply and undo), ``cache`` (page-cache eviction and mincore residency), ``census``
(which files a startup reads), ``runner`` (the interleaved run loop), ``model``
(results format v1), ``stats`` (statistics and verdicts), ``history`` (SQLite + ETS).
Library code returns data; the ``*_cli`` modules print.
"""
