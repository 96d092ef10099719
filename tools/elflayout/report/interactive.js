/* elflayout report: interactive access-pattern views, drawn with Plotly from the JSON in
   each <script class="elv-data"> (built by elflayout/report/interactive.py). */
(function () {
  'use strict';
  var MB = 1e6, SHOW_NAMES = 6;
  window.elflayoutViews = {};
  if (typeof Plotly === 'undefined') return;
  var hasGL = (function () {
    try { var c = document.createElement('canvas'); return !!(c.getContext('webgl') || c.getContext('experimental-webgl')); }
    catch (e) { return false; }
  })();

  function esc(s) { return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;'); }
  var NUM = new Intl.NumberFormat('en-US');  // toLocaleString would build one per call: seconds for 10,000s of reads
  function num(n) { return NUM.format(n); }

  // Functions of the profile's attribution overlapping bytes [a, b): sorted by offset, so a
  // binary search finds the last one starting before b; walk back while they can still reach a.
  function functionsIn(attr, a, b) {
    if (!attr) return [];
    var f = attr.f, lo = 0, hi = f.length, out = [];
    while (lo < hi) { var m = (lo + hi) >> 1; if (f[m][0] < b) lo = m + 1; else hi = m; }
    for (var k = lo - 1; k >= 0 && f[k][0] + attr.maxSize > a; k--) {
      if (f[k][0] + f[k][1] > a) out.push(f[k]);
    }
    return out.sort(function (x, y) { return x[4] - y[4]; });
  }
  function sectionsIn(secs, a, b) {
    var out = [];
    for (var i = 0; i < secs.length; i++) { var s = secs[i]; if (s.o < b && s.o + s.s > a) out.push(s.name); }
    return out;
  }

  function prepare(p, page) {
    var r = p.reads, n = r.t.length;
    p.mid = new Array(n); p.size = new Array(n); p.text = new Array(n);
    p.faultSet = new Set(r.fp);
    if (p.attr) p.attr.maxSize = p.attr.f.reduce(function (m, x) { return Math.max(m, x[1]); }, 1);
    for (var i = 0; i < n; i++) {
      p.mid[i] = (r.p[i] + r.n[i] / 2) * page / MB;
      p.size[i] = Math.min(3 + 1.6 * Math.sqrt(r.n[i]), 16);
      p.text[i] = hoverText(p, i, page);
    }
    p.ftext = r.fp.map(function (pg, j) {
      return 'page ' + num(pg) + ' touched (page fault) at ' + r.ft[j] + ' ms<br>section: ' +
        esc(sectionsIn(p.sections, pg * page, (pg + 1) * page).join(', ') || '–') +
        namesIn(p, pg * page, (pg + 1) * page);
    });
  }

  function namesIn(p, a, b) {
    if (!p.attr) return '';
    var fs = functionsIn(p.attr, a, b);
    return '<br>' + esc(p.attr.label || 'functions the profiled start-up touched here') + ': ' + (fs.length ? fs.slice(0, SHOW_NAMES).map(function (f) {
      return esc(f[2]);
    }).join(', ') + (fs.length > SHOW_NAMES ? ' (+' + (fs.length - SHOW_NAMES) + ' more: click)' : '') : 'none');
  }

  function hoverText(p, i, page) {
    var r = p.reads, a = r.p[i] * page, b = (r.p[i] + r.n[i]) * page, touched = 0;
    for (var q = r.p[i]; q < r.p[i] + r.n[i]; q++) if (p.faultSet.has(q)) touched++;
    var s = '<b>' + esc(p.variant) + '</b> read #' + num(r.i[i]) + ' at ' + r.t[i] + ' ms<br>' +
      'pages ' + num(r.p[i]) + '–' + num(r.p[i] + r.n[i] - 1) + ' (' + r.n[i] + ' page' + (r.n[i] > 1 ? 's' : '') +
      ' in this read-ahead window; ' + touched + ' touched in this run)<br>' +
      'section: ' + esc(sectionsIn(p.sections, a, b).join(', ') || '–');
    return s + namesIn(p, a, b);
  }

  // The click panel for read i (or, for a page fault, fault i): its tooltip and every function.
  function detail(p, kind, i, page) {
    var r = p.reads, fault = kind === 'faults', a = (fault ? r.fp[i] : r.p[i]) * page;
    var b = fault ? a + page : (r.p[i] + r.n[i]) * page, s = fault ? p.ftext[i] : p.text[i];
    if (p.attr) {
      var fs = functionsIn(p.attr, a, b);
      if (fs.length) {
        s += '<br><b>' + fs.length + ' function(s)</b> in these pages, in first-access order: ' + fs.slice(0, 300).map(function (f) {
          var o = f[3] >= 0 ? ' <span style="color:#777">(' + esc(p.attr.o[f[3]]) + ')</span>' : '';
          return esc(f[2]) + ' #' + f[4] + o;
        }).join('; ');
      }
    }
    return s;
  }

  // One segment per seek, from the read before the jump to the read after it (null: a break).
  function seekLines(s, xmode, page) {
    var x = [], y = [];
    for (var k = 0; k < s.i.length; k++) {
      if (xmode === 'time') x.push(s.t0[k], s.t1[k], null); else x.push(s.i[k], s.i[k] + 1, null);
      y.push(s.y0[k] * page / MB, s.y1[k] * page / MB, null);
    }
    return { x: x, y: y };
  }

  // Plotly's WebGL canvases default to twice the screen's pixels: 4x the raster work of
  // each zoom where WebGL runs on the CPU (SwiftShader), for no sharper image on a 1x screen.
  var GL_RATIO = Math.max(1, Math.min(4, window.devicePixelRatio || 1));
  // Hiding tick labels past the plot measures each one at every zoom; ours never overflow.
  var TICKS = { ticklabeloverflow: 'allow' };

  function axisName(k) { return k ? 'x' + (k + 1) : 'x'; }
  function axisKey(k) { return k ? 'xaxis' + (k + 1) : 'xaxis'; }

  function figure(d, shown, xmode) {
    var k = shown.length, gap = 0.05, w = (1 - gap * (k - 1)) / k, traces = [], shapes = [], notes = [];
    var layout = { margin: { l: 64, r: 16, t: 74, b: 48 }, hovermode: 'closest', dragmode: 'zoom', showlegend: true,
      legend: { orientation: 'h', x: 0, y: -0.09, yanchor: 'top', font: { size: 11 } },
      hoverlabel: { align: 'left', font: { size: 11 } }, uirevision: 'keep' };
    var ymax = 0;
    shown.forEach(function (p, j) {
      var xa = axisName(j), r = p.reads, type = hasGL ? 'scattergl' : 'scatter';  // SVG points: a zoom moves each one
      var xs = xmode === 'time' ? r.t : r.i, fx = xmode === 'time' ? r.ft : r.fi;
      ymax = Math.max(ymax, p.mapped_end / MB, Math.max.apply(null, p.mid.concat([0])));
      var sk = seekLines(r.seeks, xmode, d.page);
      traces.push({ type: 'scatter', mode: 'lines', x: sk.x, y: sk.y,
        xaxis: xa, yaxis: 'y', hoverinfo: 'skip', line: { color: 'rgba(214,39,40,0.5)', width: 0.8 },
        name: 'seeks (jumps of more than ' + d.seek_pages + ' pages between consecutive reads)', legendgroup: 'seek', showlegend: j === 0 });
      traces.push({ type: type, mode: 'markers', x: fx, y: r.fp.map(function (q) { return (q + 0.5) * d.page / MB; }),
        xaxis: xa, yaxis: 'y', text: p.ftext, hovertemplate: '%{text}<extra></extra>',
        marker: { symbol: 'x', size: 5, color: 'rgba(230,85,13,0.75)' }, name: 'page faults (touched)',
        legendgroup: 'fault', showlegend: j === 0, meta: { kind: 'faults', panel: p.variant } });
      traces.push({ type: type, mode: 'markers', x: xs, y: p.mid, xaxis: xa, yaxis: 'y', text: p.text,
        hovertemplate: '%{text}<extra></extra>', marker: { size: p.size, color: 'rgba(26,26,26,0.8)' },
        name: 'reads (size: read-ahead window)', legendgroup: 'read', showlegend: j === 0,
        meta: { kind: 'reads', panel: p.variant } });
      layout[axisKey(j)] = { ticklabeloverflow: TICKS.ticklabeloverflow, domain: [j * (w + gap), j * (w + gap) + w], anchor: 'y', zeroline: false,
        title: { text: xmode === 'time' ? 'time since exec (ms)' : 'read number (first-access rank)', font: { size: 12 } } };
      p.bands.forEach(function (b) {
        shapes.push({ type: 'rect', xref: xa + ' domain', x0: 0, x1: 1, yref: 'y', y0: b.a / MB, y1: b.b / MB,
          fillcolor: b.c, opacity: 0.17, line: { width: 0 }, layer: 'below' });
      });
      notes.push({ xref: xa + ' domain', x: 0, yref: 'paper', y: 1.0, yanchor: 'bottom', xanchor: 'left', align: 'left',
        showarrow: false, font: { size: 11 }, text: '<b>' + esc(p.variant) + '</b> · ' + esc(p.name) + ' · ' + esc(p.state) +
          ' · run ' + p.run + '<br>' + esc(p.caption) });
    });
    shown.forEach(function (p, j) {
      p.bands.forEach(function (b) {
        if (b.f === 'not loaded' || (b.b - b.a) / MB < 0.02 * ymax) return;
        notes.push({ xref: axisName(j) + ' domain', x: 1, xanchor: 'right', yref: 'y', y: (b.a + b.b) / 2 / MB,
          text: esc(b.l), showarrow: false, font: { size: 10, color: b.c } });
      });
    });
    layout.yaxis = { ticklabeloverflow: TICKS.ticklabeloverflow, range: [0, ymax * 1.01], title: { text: 'file offset (MB)', font: { size: 12 } }, zeroline: false };
    layout.shapes = shapes; layout.annotations = notes;
    return { data: traces, layout: layout };
  }

  function barFigure(d, panels) {
    var traces = [], names = panels.map(function (p) { return p.variant; }), total = {};
    d.families.forEach(function (fc) {
      var f = fc[0], xs = panels.map(function (p) { return p.counts.read[f] || 0; });
      if (!xs.some(function (x) { return x; })) return;
      traces.push({ type: 'bar', orientation: 'h', y: names, x: xs, name: f, marker: { color: fc[1] }, meta: { family: f },
        customdata: panels.map(function (p) { return p.counts.touched[f] || 0; }),
        hovertemplate: '%{y}: %{x:,} pages of ' + esc(f) + ' read, %{customdata:,} touched<br>click: zoom the access view here<extra></extra>' });
    });
    panels.forEach(function (p) { total[p.variant] = Object.values(p.counts.read).reduce(function (a, b) { return a + b; }, 0); });
    traces.push({ type: 'scatter', mode: 'markers+text', y: names, x: panels.map(function (p) { return p.counts.touched_total; }),
      marker: { symbol: 'line-ns-open', size: 26, color: '#111', line: { width: 3, color: '#111' } }, textposition: 'top center',
      text: panels.map(function (p) { return 'touched ' + num(p.counts.touched_total); }), textfont: { size: 10 },
      name: 'pages touched: the floor no layout can read below', hovertemplate: '%{y}: %{x:,} pages touched<extra></extra>' });
    traces.push({ type: 'scatter', mode: 'text', y: names, x: names.map(function (v) { return total[v]; }), showlegend: false,
      text: names.map(function (v) { return '  ' + num(total[v]) + ' pages'; }), textposition: 'middle right', hoverinfo: 'skip' });
    var xmax = Math.max.apply(null, names.map(function (v) { return total[v]; }).concat([1]));
    return { data: traces, layout: { barmode: 'stack', margin: { l: 110, r: 20, t: 30, b: 40 }, height: 160 + 44 * names.length,
      xaxis: { title: { text: 'distinct pages read, by section family', font: { size: 12 } }, range: [0, xmax * 1.2] },
      yaxis: { autorange: 'reversed' }, legend: { orientation: 'h', x: 0, y: -0.3, yanchor: 'top', font: { size: 10 } },
      title: { text: 'Where the pages go', font: { size: 13 }, x: 0, y: 0.99 } } };
  }

  function controls(ctl, panels, state, redraw) {
    var h = panels.map(function (p, j) {
      return '<label><input type="checkbox" data-j="' + j + '"' + (state.shown.indexOf(j) >= 0 ? ' checked' : '') + '> ' +
        esc(p.variant) + '</label>';
    }).join('') + ' &nbsp; x: <label><input type="radio" name="' + ctl.id + '-x" value="time" checked> time</label>' +
      '<label><input type="radio" name="' + ctl.id + '-x" value="rank"> read number</label>';
    ctl.insertAdjacentHTML('beforeend', '<div>' + h + '</div>');
    ctl.querySelectorAll('input[type=checkbox]').forEach(function (c) {
      c.addEventListener('change', function () {
        var on = [].slice.call(ctl.querySelectorAll('input[type=checkbox]:checked')).map(function (x) { return +x.dataset.j; });
        if (!on.length) { c.checked = true; return; }
        state.shown = on; redraw();
      });
    });
    ctl.querySelectorAll('input[type=radio]').forEach(function (c) {
      c.addEventListener('change', function () { state.xmode = c.value; redraw(); });
    });
  }

  function build(root, d) {
    var id = root.id, plot = document.getElementById(id + '-plot'), ctl = document.getElementById(id + '-ctl'),
      info = document.getElementById(id + '-info'), bar = document.getElementById(id + '-bar');
    var notes = [];
    if (d.error) notes.push(d.error);
    d.panels.forEach(function (p) { if (p.missing) notes.push(p.missing); else (p.notes || []).forEach(function (n) { notes.push(p.variant + ': ' + n); }); });
    ctl.innerHTML = notes.map(function (n) { return '<p class="elv-note">⚠ ' + esc(n) + '</p>'; }).join('');
    var panels = d.panels.filter(function (p) { return !p.missing; });
    if (!panels.length) {
      plot.style.height = 'auto'; info.style.display = 'none'; bar.style.display = 'none';
      plot.innerHTML = '<p class="warn">Nothing to draw for this library: see above.</p>';
      return;
    }
    var tm = { t0: performance.now() };
    var state = { shown: panels.length <= 2 ? panels.map(function (_, j) { return j; }) : [0, panels.length - 1], xmode: 'time', pinned: false };
    function redraw() {
      // tooltips of a variant are built when it is first shown: 10,000s of strings per run
      state.shown.forEach(function (j) { if (!panels[j].text) prepare(panels[j], d.page); });
      var f = figure(d, state.shown.map(function (j) { return panels[j]; }), state.xmode);
      f.layout.uirevision = state.xmode + state.shown.join(',');
      return Plotly.react(plot, f.data, f.layout, { responsive: true, scrollZoom: true, displaylogo: false,
        plotGlPixelRatio: GL_RATIO });
    }
    if (panels.length > 1) controls(ctl, panels, state, redraw);
    redraw();
    tm.drawn = performance.now();
    plot.on('plotly_click', function (ev) {
      var pt = ev.points && ev.points[0];
      if (!pt || !pt.data.meta || !pt.data.meta.kind) return;
      var p = panels.filter(function (q) { return q.variant === pt.data.meta.panel; })[0];
      info.innerHTML = detail(p, pt.data.meta.kind, pt.pointNumber, d.page);
    });
    var bf = barFigure(d, panels);
    Plotly.newPlot(bar, bf.data, bf.layout, { displaylogo: false, responsive: true });
    bar.style.height = bf.layout.height + 'px';
    bar.on('plotly_click', function (ev) {
      var pt = ev.points && ev.points[0];
      if (!pt || !pt.data.meta || !pt.data.meta.family) return;
      var j = panels.map(function (p) { return p.variant; }).indexOf(pt.y), p = panels[j];
      var bs = p.bands.filter(function (b) { return b.f === pt.data.meta.family; });
      if (!bs.length) return;
      if (state.shown.indexOf(j) < 0) {
        state.shown = state.shown.concat([j]).sort();
        var box = ctl.querySelector('input[data-j="' + j + '"]'); if (box) box.checked = true;
      }
      var lo = Math.min.apply(null, bs.map(function (b) { return b.a; })), hi = Math.max.apply(null, bs.map(function (b) { return b.b; }));
      redraw().then(function () { Plotly.relayout(plot, { 'yaxis.range': [lo / MB, hi / MB] }); });
      plot.scrollIntoView({ block: 'nearest' });
    });
    tm.bar = performance.now();
    window.elflayoutViews[id] = { panels: panels, state: state, plot: plot, bar: bar, redraw: redraw, timing: tm };
  }

  document.querySelectorAll('script.elv-data').forEach(function (s) {
    var root = document.getElementById(s.dataset.id), t0 = performance.now();
    try {
      build(root, JSON.parse(s.textContent));
      if (window.elflayoutViews[root.id]) window.elflayoutViews[root.id].buildMs = performance.now() - t0;
    }
    catch (e) {
      var plot = document.getElementById(s.dataset.id + '-plot');
      plot.style.height = 'auto';
      plot.innerHTML = '<p class="warn">This view could not be drawn: ' + esc(e && e.message || e) + '</p>';
    }
  });
})();
