"""OpenSSL's libcrypto.a (Debian's libssl-dev) through split → profile → order → link:
``targets.libcrypto`` relinks libcrypto.so.3 that Debian's openssl and libssl.so.3 load
in place of Debian's library, with the same exported symbols and versions."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli

from elflayout.errors import ElflayoutError

# relinks libcrypto.so.3 from Debian's libcrypto.a with three linkers, profiles openssl
pytestmark = [pytest.mark.skipif(not os.path.exists("/usr/bin/openssl"), reason="openssl not installed"),
              pytest.mark.download, pytest.mark.valgrind, pytest.mark.slow]


def _exports(lib) -> set[tuple[str, str]]:
    """(name, version) of every defined dynamic symbol, read with pyelftools."""
    from elftools.elf.elffile import ELFFile

    out = set()
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        ver, vd = elf.get_section_by_name(".gnu.version"), elf.get_section_by_name(".gnu.version_d")
        names = {d["vd_ndx"]: next(aux).name for d, aux in vd.iter_versions()}
        for i, s in enumerate(elf.get_section_by_name(".dynsym").iter_symbols()):
            ndx = ver.get_symbol(i)["ndx"]
            v = names.get(ndx & 0x7fff) if isinstance(ndx, int) else None
            # GNU ld also defines each version's name as an absolute symbol; lld does not
            if s.name and s["st_shndx"] != "SHN_UNDEF" and v and s.name != v:
                out.add((s.name, v))
    return out


def _text_order(lib) -> list[str]:
    """Names of the function symbols of .symtab in address order."""
    from elftools.elf.elffile import ELFFile

    with open(lib, "rb") as f:
        syms = [(s["st_value"], s.name) for s in ELFFile(f).get_section_by_name(".symtab").iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_size"]]
    return [n for _, n in sorted(syms)]


@pytest.fixture(scope="module")
def crypto():
    from elflayout.profile.valgrind import tool_status
    from elflayout.targets import libcrypto

    if tool_status():
        pytest.skip(tool_status())
    return libcrypto


def test_relinks_export_debians_symbols(crypto):
    """The archive-order relink exports exactly Debian's (symbol, version) pairs, and
    prepare() already proved its digests and ciphers equal to Debian's library's."""
    d = crypto.prepare("lld")
    assert _exports(d["lib"]) == _exports(crypto.SYSTEM_LIB)
    r = subprocess.run(d["workloads"]["dgst"], env=dict(os.environ, **d["env"]), capture_output=True, text=True)
    deb = subprocess.run(d["workloads"]["dgst"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == deb.stdout and "SHA2-256" in r.stdout


def test_profile_order_link_split(crypto, tmp_path):
    """profile (valgrind) → order --format lld → relink of the split objects: the
    profiled functions come first in .text in profile order, and openssl still works."""
    from elflayout.profile import model

    base = crypto.prepare("lld", split=True)
    prof, order = tmp_path / "p.json", tmp_path / "o.lld"
    run_cli("profile", "--target", base["lib"], "--map", base["map"], "--env", f"LD_LIBRARY_PATH={base['outdir']}",
            "--stdout", "null", "-o", prof, "--", *base["workloads"]["dgst"])
    run_cli("order", prof, "--format", "lld", "--lib", base["lib"], "--objects-from", base["map"], "-o", order)
    d = crypto.prepare("lld", split=True, extra_link_args=[f"--symbol-ordering-file={order}",
                                                          "--no-warn-symbol-ordering"])
    touched = [f.name for f in model.load(prof).targets[0].functions]
    assert len(touched) > 100
    first = _text_order(d["lib"])[:len(touched)]
    # Nearly all of the profiled functions open .text (a few are aliases or sit in
    # hand-written assembly sections kept whole, which move with their section).
    assert len(set(first) & set(touched)) >= 0.9 * len(touched)
    assert crypto.verify(d["outdir"]) == len(crypto.VERIFY)


def test_bad_object_order(crypto):
    objs = crypto.objects()
    with pytest.raises(ElflayoutError, match="not one of the libcrypto.a objects"):
        crypto.prepare("lld", object_order=["nonsense.o"])
    with pytest.raises(ElflayoutError, match="exactly once"):
        crypto.prepare("lld", object_order=[o.name for o in objs[:-1]])
    assert Path(crypto.version_script()).read_text().startswith("OPENSSL_3.0.0 {")
