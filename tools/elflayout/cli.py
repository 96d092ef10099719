"""Command-line entry point: ``elflayout VERB ...``.

Each verb lives in its own module, which defines::

    SUMMARY = "one line"
    EPILOG = "worked example(s) shown by --help"
    def add_arguments(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int

Modules are imported only when their verb is used, so ``elflayout --help`` and
fast verbs do not pay for numpy/matplotlib imports they do not need.
This module is the only place (with the verb modules' ``run``) that prints.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from elflayout import __version__
from elflayout.errors import ElflayoutError, Finding, one_line

# verb -> (module, one-line summary). The summary is repeated here so the top-level
# --help does not import every stage.
VERBS: dict[str, tuple[str, str]] = {
    "inspect": ("elflayout.inspect.cli", "segments, sections, relocations, symbols (and link map) of an ELF file"),
    "profile": ("elflayout.profile.cli", "record the first-access order of a target library during a workload"),
    "merge": ("elflayout.profile.merge_cli", "merge several profiles of the same build into one"),
    "order": ("elflayout.order.cli", "turn a profile into an object order, lld/gold ordering file or ld script"),
    "link": ("elflayout.order.link_cli", "run a real link command with a profile's ordering applied"),
    "launch": ("elflayout.order.launch_cli",
               "linker launcher for CMake, Meson and make: profile a build's library once, relink it ordered"),
    "check-order": ("elflayout.order.check_cli", "how well a linked library honours a profile"),
    "simulate": ("elflayout.order.simulate_cli", "predict pages read at cold start for a layout (readahead model)"),
    "split": ("elflayout.split.cli", "give each function and data object its own section (objects without -ffunction-sections)"),
    "relocs": ("elflayout.relocs.cli", "dynamic relocations by type and section, optimal RELR size"),
    "pack-relocs": ("elflayout.relocs.pack_cli", "pack RELATIVE relocations of a linked library into DT_RELR"),
    "measure": ("elflayout.measure.cli", "measure cold/selective/hot startup: time, faults, pages read per file"),
    "compare": ("elflayout.measure.compare_cli", "statistics and verdicts for a results file"),
    "calibrate": ("elflayout.measure.calibrate_cli",
                  "A/A runs of one command: noise, minimum detectable effect and the runs to use"),
    "screen": ("elflayout.report.screen_cli",
               "screen set-up factors (ASLR, read-ahead, pinning, storage, variants) by a factorial design"),
    "history": ("elflayout.measure.history_cli",
                "keep results in SQLite or PostgreSQL and flag regressions (ETS intervals)"),
    "plot": ("elflayout.report.plot_cli", "access-pattern and timing plots of results or profiles"),
    "report": ("elflayout.report.cli", "self-contained HTML report of results and profiles"),
    "storage": ("elflayout.storage.cli", "serve a directory through an emulated slow disk (FUSE)"),
    "preload": ("elflayout.preload.cli", "plan and apply startup preloading for libraries you cannot relink"),
    "demo": ("elflayout.demo", "run the whole pipeline on the bundled example"),
}


def _top_parser() -> argparse.ArgumentParser:
    verbs = "\n".join(f"  {v:<13} {s}" for v, (_, s) in VERBS.items())
    p = argparse.ArgumentParser(
        prog="elflayout",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Make large ELF shared libraries start faster by reading less from disk.",
        epilog=f"verbs:\n{verbs}\n\n'elflayout VERB --help' shows a verb's options and a worked example.",
    )
    p.add_argument("--version", action="version", version=f"elflayout {__version__}")
    p.add_argument("verb", nargs="?", help=argparse.SUPPRESS)
    return p


def verb_parser(verb: str) -> tuple[argparse.ArgumentParser, object]:
    """The argparse parser of one verb and its module (used by main and the docs check)."""
    modname, summary = VERBS[verb]
    try:
        mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        if e.name and modname.startswith(e.name):
            raise ElflayoutError(f"verb {verb!r} is not available in this installation ({e.name} missing)") from None
        raise ElflayoutError(f"verb {verb!r} needs the Python module {e.name!r}: run 'make bootstrap'") from None
    p = argparse.ArgumentParser(
        prog=f"elflayout {verb}",
        description=getattr(mod, "SUMMARY", summary),
        epilog=getattr(mod, "EPILOG", None),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mod.add_arguments(p)
    return p, mod


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        top = _top_parser()
        top.parse_args(argv)
        top.print_help()
        return 0 if not argv else 2
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        print(f"elflayout: error: unknown verb {verb!r} (try 'elflayout --help')", file=sys.stderr)
        return 2
    try:
        parser, mod = verb_parser(verb)
        args = parser.parse_args(rest)
        rc = mod.run(args)
        return 0 if rc is None else int(rc)
    except Finding as e:
        print(f"elflayout: {one_line(e)}", file=sys.stderr)
        return e.exit_status
    except ElflayoutError as e:
        print(f"elflayout: error: {one_line(e)}", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print("elflayout: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `elflayout ... | head`: not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        # Bad input is an ElflayoutError raised where the input is read, naming the file;
        # anything else (a ValueError, an OSError nobody translated, running out of memory
        # on an allocation we sized) is a bug of ours: still one line, with a way to see more.
        if os.environ.get("ELFLAYOUT_DEBUG"):
            raise
        print(f"elflayout: internal error: {type(e).__name__}: {one_line(e)} (set ELFLAYOUT_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
