"""Plots and the HTML report.

- ``data``: load results/profile files and turn them into numpy series and tables
  (pure data, no matplotlib);
- ``access``: access-pattern plots (offset in the file over time, ELF sections as bands);
- ``timing``: violin + scatter of run times, history series with prediction intervals;
- ``interactive``: the report's interactive access view (Plotly, inlined; drawn by
  ``interactive.js`` from the data it writes into the page);
- ``html``: one self-contained HTML file (inline PNGs, inline CSS/JS, no network);
- ``plot_cli`` / ``cli``: the ``plot`` and ``report`` verbs.

matplotlib is imported inside the drawing functions so the CLI starts fast.
"""
