"""Dynamic relocations: analysis (``relocs``) and post-link RELR packing (``pack-relocs``)."""
