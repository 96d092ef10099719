"""docs/cli.md is the real ``--help`` of every verb that exists (regenerate: python3 docs/gen_cli.py)."""

import re
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli

sys.path.insert(0, str(ROOT / "docs"))
import gen_cli  # noqa: E402
from elflayout.cli import VERBS  # noqa: E402

CLI_MD = ROOT / "docs" / "cli.md"
EXISTING = [v for v, (mod, _) in VERBS.items() if gen_cli.verb_available(mod)]


def test_cli_md_in_sync():
    r = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_cli.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + "\n(run: python3 docs/gen_cli.py)"


def _block(text: str, verb: str) -> str:
    m = re.search(rf"^\$ elflayout {re.escape(verb)} --help\n(.*?)^```$", text, re.M | re.S)
    assert m, f"docs/cli.md has no --help block for {verb} (run: python3 docs/gen_cli.py)"
    return m.group(1)


@pytest.mark.parametrize("verb", EXISTING)
def test_cli_md_block_equals_real_help(verb):
    """The page shows exactly what `elflayout VERB --help` prints at 100 columns."""
    r = run_cli(verb, "--help", env={"COLUMNS": gen_cli.WIDTH}, check=0)
    assert _block(CLI_MD.read_text(), verb) == r.stdout


@pytest.mark.parametrize("verb", EXISTING)
def test_help_has_worked_example(verb):
    out = run_cli(verb, "--help", check=0).stdout
    assert re.search(rf"^\s+elflayout {re.escape(verb)}\b", out, re.M), f"`elflayout {verb} --help` shows no example"


def test_missing_verbs_listed_not_documented():
    text = CLI_MD.read_text()
    for v, (mod, _) in VERBS.items():
        if v not in EXISTING:
            assert f"- `{v}`:" in text and f"## `elflayout {v}`" not in text
