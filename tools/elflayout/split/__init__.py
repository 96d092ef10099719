"""``elflayout split``: one section per function and data object in objects built
without ``-ffunction-sections -fdata-sections``, so that function (and data) order
works on the objects people actually have.

Modules, one per concern: ``reader`` (the relocatable object), ``archive`` (``.a``
members), ``extents`` (units from the symbol table), ``disasm`` (capstone: references
the assembler resolved itself), ``plan`` (which units may part, where each reference
goes), ``reach`` (rules against label differences the assembler resolved), ``writer``
(the new object), ``check`` (the ``--check`` proof), ``equivalence`` (its links in
other orders and ``--run``), ``api``
(inputs to outputs, with the report), ``cli``.
"""
