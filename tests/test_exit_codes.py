"""The CLI's error funnel: exit 2 only for bad input (an ElflayoutError naming the file),
exit 3 with a debug hint for anything else, which is a bug of ours."""

import contextlib
import io
import json

import pytest

from conftest import run_cli
from elflayout import cli
from elflayout.errors import ElflayoutError


def _main(argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = cli.main(argv)
    return rc, err.getvalue()


@pytest.mark.parametrize("exc", [ValueError("bad value"), OSError(5, "Input/output error"), MemoryError(),
                                 KeyError("k"), UnicodeDecodeError("utf-8", b"\xe1", 0, 1, "invalid")])
def test_an_exception_of_our_code_is_exit_3_with_the_debug_hint(monkeypatch, exc):
    _, mod = cli.verb_parser("relocs")

    def boom(args):
        raise exc

    monkeypatch.setattr(mod, "run", boom)
    monkeypatch.delenv("ELFLAYOUT_DEBUG", raising=False)
    rc, err = _main(["relocs", "/bin/true"])
    assert rc == 3 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"elflayout: internal error: {type(exc).__name__}") and "ELFLAYOUT_DEBUG=1" in err
    monkeypatch.setenv("ELFLAYOUT_DEBUG", "1")
    with pytest.raises(type(exc)):
        cli.main(["relocs", "/bin/true"])


def test_bad_input_is_exit_2_with_one_line(monkeypatch, tmp_path):
    _, mod = cli.verb_parser("relocs")
    monkeypatch.setattr(mod, "run", lambda args: (_ for _ in ()).throw(ElflayoutError(f"{args.lib}: not an ELF file")))
    rc, err = _main(["relocs", str(tmp_path / "x")])
    assert (rc, err) == (2, f"elflayout: error: {tmp_path / 'x'}: not an ELF file\n")


@pytest.mark.parametrize("argv, says", [
    (["relocs", "{d}/missing.so"], "missing.so: no such file"),
    (["relocs", "{d}"], "is a directory"),
    (["relocs", "{d}/text.so"], "text.so: not an ELF file"),
    (["inspect", "{d}/missing.so"], "missing.so: no such file"),
    (["compare", "{d}/text.so"], "text.so: not valid JSON"),
    (["report", "{d}/missing.json", "-o", "{d}/r.html"], "missing.json: no such file"),
])
def test_real_bad_inputs_stay_exit_2(tmp_path, argv, says):
    (tmp_path / "text.so").write_text("hello\n")
    r = run_cli(*[a.format(d=tmp_path) for a in argv], check=2)
    assert says in r.stderr and len(r.stderr.strip().splitlines()) == 1 and "internal error" not in r.stderr, r.stderr


@pytest.mark.parametrize("first", ["soon", [1]])
def test_a_preload_plan_with_a_bad_first_time_is_bad_input(tmp_path, first):
    """A plan's ``first`` was read with float(): a string was a ValueError (exit 2 only by
    the funnel), a list a TypeError (exit 3); both are bad input, named where read."""
    f = tmp_path / "lib.so"
    f.write_bytes(b"\0" * 8192)
    doc = {"format": "elflayout-preload-plan", "version": 1, "metadata": {},
           "files": [{"path": str(f), "size": 8192, "mtime_ns": 1, "build_id": None, "ranges": [[0, 4096]],
                      "needed_pages": 1, "first": first}]}
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(doc))
    from elflayout.preload import model

    with pytest.raises(ElflayoutError, match=r"plan.json: files\[0\].first must be a number"):
        model.load(p)


def test_link_object_order_mismatch_is_an_internal_error(tmp_path):
    """The order written for a link always lists its own objects: a mismatch is our bug
    (exit 3), not bad input (it was an ElflayoutError, exit 2)."""
    from elflayout.order.link import apply

    parsed = {"cmd": ["cc", "a.o", "b.o", "-o", "lib.so"], "driver": True, "output": "lib.so",
              "object_positions": [1, 2], "fuse": True}
    assert apply(parsed, "bfd", "objects", "b.o\na.o\n", tmp_path / "o.txt")[1:3] == ["b.o", "a.o"]
    with pytest.raises(RuntimeError, match="does not list the command's objects"):
        apply(parsed, "bfd", "objects", "b.o\nc.o\n", tmp_path / "o.txt")


@pytest.mark.parametrize("verb", ["inspect", "relocs"])
def test_message_quoting_control_bytes_stays_one_line(tmp_path, verb):
    """A message quotes what the input holds (its name, a dlopen error naming a damaged symbol):
    newlines and control bytes in it are escaped, so the error is still one line."""
    bad = tmp_path / "a\nb\x1b[2J.so"
    bad.write_bytes(b"junk")
    rc, err = _main([verb, str(bad)])
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "\x1b" not in err and "a\\nb\\x1b[2J.so" in err, err
