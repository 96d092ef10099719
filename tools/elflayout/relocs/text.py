"""Text rendering of a ``relocs`` document (``elflayout relocs`` prints it)."""

from __future__ import annotations


def render(doc: dict) -> str:
    out = [f"{doc['target']['path']}  ({doc['metadata']['machine']}, build-id {doc['target']['build_id']})"]
    for t in doc["tables"]:
        out.append(f"  {t['section']:<15} {t['count']:>10,} relocations  {t['bytes']:>12,} bytes  {t['pages']:>7,} pages")
    if doc["relr"]["present"]:
        out.append(f"  {'DT_RELR':<15} {doc['relr']['count']:>10,} relocations  {doc['relr']['bytes']:>12,} bytes  {doc['relr']['pages']:>7,} pages")
    sa = doc.get("self_applied", {})
    if sa.get("present"):
        out.append(f"  {'self-applied':<15} {sa['count']:>10,} relocations  {sa['bytes']:>12,} bytes  {sa['pages']:>7,} pages"
                   f"  ({sa['form']} form: the routine at {sa['routine']:#x} is DT_INIT, then {sa['chains_to']:#x})")
    out.append("\n  by type:")
    for r in sorted(doc["types"], key=lambda r: -r["count"]):
        out.append(f"    {r['table']:<15} {r['type']:<22} {r['count']:>10,}  {r['bytes']:>12,} bytes")
    out.append("\n  by target section:")
    for s, d in sorted(doc["by_target_section"].items(), key=lambda kv: -sum(kv[1].values())):
        parts = ", ".join(f"{k} {v:,}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))
        out.append(f"    {s:<20} {parts}")
    r = doc["relative"]
    out.append(f"\n  RELATIVE: {r['count']:,} ({r['word_aligned']:,} word-aligned, {r['file_backed']:,} in file-backed "
               f"data, {r['packable']:,} packable)")
    out.append(f"    as RELA {r['rela_bytes']:,} bytes -> optimal RELR {r['relr_bytes']:,} bytes; "
               f"relocation table after packing {r['table_bytes_after_packing']:,} bytes")
    out.append(f"  pages of the file holding relocation targets: {doc['pages']['targets']:,}; "
               f"holding relocation tables: {doc['pages']['tables']:,}")
    return "\n".join(out)
