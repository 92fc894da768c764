"""Static CSS and scripts of the HTML pages (no data, no user strings)."""

from __future__ import annotations

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --soft:#f6f8fa;
  --ok:#007a5a; --warn:#8a6100; --fail:#b3261e; --link:#0b63c5; }
* { box-sizing: border-box; }
body { margin:0; color:var(--fg); background:var(--bg);
  font:14px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif; }
header { padding:20px 32px 8px; }
h1 { font-size:22px; margin:0 0 4px; word-break:break-word; }
h2 { font-size:18px; margin:0 0 6px; display:inline; }
h3 { font-size:15px; margin:14px 0 6px; word-break:break-word; }
.sub, .how, .note, footer, .dim { color:var(--muted); }
.how { margin:2px 0 8px; max-width:980px; }
.note { margin:2px 0 6px; }
.warn-line { color:var(--warn); }
.bold-line { font-weight:600; }
nav.toc { position:sticky; top:0; z-index:10; background:rgba(255,255,255,0.97);
  border-bottom:1px solid var(--line); border-top:1px solid var(--line); padding:6px 32px;
  display:flex; flex-wrap:wrap; gap:4px 16px; align-items:center; }
nav.toc a { color:var(--link); text-decoration:none; font-size:13px; white-space:nowrap; }
nav.toc a:hover { text-decoration:underline; }
nav.toc select { font:inherit; font-size:13px; }
main { padding:4px 32px 32px; max-width:1400px; }
section, details.block { padding:14px 0 10px; border-bottom:1px solid var(--line);
  scroll-margin-top:48px; display:block; }
section section, details.block details.block { border-bottom:none; padding:8px 0 4px; }
details.block > summary { cursor:pointer; list-style-position:outside; }
details.block > summary .sum { color:var(--muted); margin-left:10px; }
.figure { width:100%; min-height:300px; }
figure { margin:8px 0 14px; }
.fig-error { color:var(--fail); padding:16px; border:1px dashed var(--fail); }
.table-wrap { overflow-x:auto; max-width:100%; }
table { border-collapse:collapse; font-variant-numeric:tabular-nums; margin:4px 0 8px; }
th, td { padding:3px 10px; border-bottom:1px solid var(--line); white-space:nowrap; }
th { background:var(--soft); font-weight:600; }
th[title] { text-decoration:underline dotted; cursor:help; }
tbody tr:nth-child(even) { background:#fafbfc; }
td.t, th.t { text-align:left; white-space:normal; min-width:16em; max-width:60em; }
table.tbl-summary { width:100%; }
table.tbl-summary td.t { white-space:nowrap; overflow:hidden; text-overflow:ellipsis; max-width:0; width:100%; min-width:12em; }
td.l, th.l { text-align:left; }
td.n, th.n { text-align:right; }
tr.bold td { font-weight:600; }
table.facts td:first-child { font-weight:600; }
table.facts td { white-space:normal; }
.band { font-weight:600; }
.band-low { color:var(--ok); }
.band-medium { color:var(--warn); }
.band-high { color:#a54d00; font-weight:600; }
.band-severe { color:var(--fail); font-weight:700; }
.hot { color:var(--fail); font-weight:700; }
.verdict { font-weight:700; text-transform:uppercase; white-space:nowrap; padding:0 6px;
  border-radius:4px; }
.verdict-ok { color:#fff; background:var(--ok); }
.verdict-warn { color:#fff; background:var(--warn); }
.verdict-fail, .verdict-damaged { color:#fff; background:var(--fail); }
.verdict-na { color:var(--muted); font-weight:400; text-transform:none; }
.checks td { white-space:normal; vertical-align:top; }
.checks .next { font-style:italic; margin-top:4px; }
.checks details pre { font-size:12px; max-height:320px; overflow:auto; background:var(--soft);
  padding:8px; white-space:pre-wrap; word-break:break-word; }
ul.lines { margin:4px 0 10px; padding-left:20px; }
.hidden-run { display:none; }
footer { padding:16px 32px 32px; font-size:12px; }
"""

# First of the page's scripts (before plotly.js), so that even an error while loading it is
# recorded.
ONERROR = """
window.__mismatchErrors = [];
window.addEventListener('error', function (e) {
  window.__mismatchErrors.push(String(e.message || e));
  document.documentElement.setAttribute('data-js-errors', window.__mismatchErrors.join(' | '));
});
"""

# Raw deflate (RFC 1951) decoded in the page, synchronously (render/html.pack writes it): a
# figure is unpacked and drawn in one go, in every browser, with nothing to fetch. Canonical
# Huffman codes decoded a bit at a time (as zlib's puff.c does): a figure's few hundred KB of
# JSON take a few milliseconds.
INFLATE = """
var inflate = (function () {
  var LBASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83,
               99, 115, 131, 163, 195, 227, 258];
  var LEXT = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
  var DBASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769,
               1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577];
  var DEXT = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11,
              12, 12, 13, 13];
  var ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
  function huffman(lengths) {  // codes per length, and the symbols in code order
    var count = new Uint16Array(16), offs = new Uint16Array(16);
    var symbol = new Uint16Array(lengths.length), i;
    for (i = 0; i < lengths.length; i++) { count[lengths[i]]++; }
    for (i = 1; i < 15; i++) { offs[i + 1] = offs[i] + count[i]; }
    for (i = 0; i < lengths.length; i++) {
      if (lengths[i]) { symbol[offs[lengths[i]]++] = i; }
    }
    return {count: count, symbol: symbol};
  }
  function fixed() {
    var lit = new Uint8Array(288), dist = new Uint8Array(30), i;
    for (i = 0; i < 288; i++) { lit[i] = i < 144 ? 8 : i < 256 ? 9 : i < 280 ? 7 : 8; }
    dist.fill(5);
    return [huffman(lit), huffman(dist)];
  }
  return function (src) {
    var out = new Uint8Array(Math.max(1024, src.length * 8)), n = 0;
    var pos = 0, buf = 0, have = 0;
    function bits(k) {
      while (have < k) {
        if (pos >= src.length) { throw new Error('figure data cut short'); }
        buf |= src[pos++] << have;
        have += 8;
      }
      var v = buf & ((1 << k) - 1);
      buf >>>= k;
      have -= k;
      return v;
    }
    function decode(h) {
      var code = 0, first = 0, index = 0;
      for (var len = 1; len < 16; len++) {
        code |= bits(1);
        var count = h.count[len];
        if (code - count < first) { return h.symbol[index + (code - first)]; }
        index += count;
        first = (first + count) << 1;
        code <<= 1;
      }
      throw new Error('figure data: bad Huffman code');
    }
    function room(k) {
      if (n + k <= out.length) { return; }
      var bigger = new Uint8Array(Math.max(out.length * 2, n + k));
      bigger.set(out);
      out = bigger;
    }
    function stored() {
      buf = 0;
      have = 0;
      if (pos + 4 > src.length) { throw new Error('figure data cut short'); }
      var len = src[pos] | (src[pos + 1] << 8);
      pos += 4;
      if (pos + len > src.length) { throw new Error('figure data cut short'); }
      room(len);
      out.set(src.subarray(pos, pos + len), n);
      n += len;
      pos += len;
    }
    function dynamic() {
      var nlen = bits(5) + 257, ndist = bits(5) + 1, ncode = bits(4) + 4, i;
      var lengths = new Uint8Array(19);
      for (i = 0; i < ncode; i++) { lengths[ORDER[i]] = bits(3); }
      var codes = huffman(lengths), all = new Uint8Array(nlen + ndist);
      for (i = 0; i < nlen + ndist;) {
        var sym = decode(codes), rep = 0, val = 0;
        if (sym < 16) { all[i++] = sym; continue; }
        if (sym === 16) {
          if (i === 0) { throw new Error('figure data: repeat with no length'); }
          val = all[i - 1];
          rep = 3 + bits(2);
        } else {
          rep = sym === 17 ? 3 + bits(3) : 11 + bits(7);
        }
        if (i + rep > nlen + ndist) { throw new Error('figure data: too many lengths'); }
        while (rep--) { all[i++] = val; }
      }
      return [huffman(all.subarray(0, nlen)), huffman(all.subarray(nlen))];
    }
    function codes(lit, dist) {
      for (;;) {
        var sym = decode(lit);
        if (sym < 256) { room(1); out[n++] = sym; continue; }
        if (sym === 256) { return; }
        sym -= 257;
        if (sym >= 29) { throw new Error('figure data: bad length'); }
        var len = LBASE[sym] + bits(LEXT[sym]);
        var d = decode(dist);
        if (d >= 30) { throw new Error('figure data: bad distance'); }
        var back = DBASE[d] + bits(DEXT[d]);
        if (back > n) { throw new Error('figure data: distance too far back'); }
        room(len);
        for (var j = 0; j < len; j++, n++) { out[n] = out[n - back]; }
      }
    }
    var last;
    do {
      last = bits(1);
      var type = bits(2);
      if (type === 0) { stored(); }
      else if (type === 1) { codes.apply(null, fixed()); }
      else if (type === 2) { codes.apply(null, dynamic()); }
      else { throw new Error('figure data: bad block type'); }
    } while (!last);
    return out.subarray(0, n);
  };
})();
"""

# Figures are unpacked and drawn when they come into view: a page of many folded runs loads
# without building the plots nobody opened. A figure inside a folded block is not drawn even if
# the browser reports it in view; opening the block looks at its figures again. Before printing,
# every figure of the open blocks is drawn. Only in a page with figures (after INFLATE).
FIGURES = """
(function () {
  var config = {responsive: true, displaylogo: false,
                modeBarButtonsToRemove: ['select2d', 'lasso2d']};
  function fail(div, err) {
    div.className += ' fig-error';
    div.textContent = 'This figure could not be drawn: ' + err;
    window.__mismatchErrors.push(String(err));
    document.documentElement.setAttribute('data-js-errors', window.__mismatchErrors.join(' | '));
  }
  function unpack(text) {
    var raw = atob(text.trim()), bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { bytes[i] = raw.charCodeAt(i); }
    return JSON.parse(new TextDecoder('utf-8').decode(inflate(bytes)));
  }
  var packed = {};
  function draw(div) {
    var node = packed[div.id];
    if (!node) { return; }
    delete packed[div.id];
    try {
      var fig = unpack(node.textContent);
      Plotly.newPlot(div, fig.data, fig.layout, config).catch(function (err) { fail(div, err); });
    } catch (err) {
      fail(div, err);
    }
  }
  function shown(div) {  // not in a folded block nor in a hidden run
    for (var d = div.closest('details'); d; d = d.parentElement.closest('details')) {
      if (!d.open) { return false; }
    }
    return !div.closest('.hidden-run');
  }
  var divs = [];
  Array.prototype.forEach.call(document.querySelectorAll('script[data-figure]'), function (node) {
    var div = document.getElementById(node.getAttribute('data-figure'));
    if (div) { packed[div.id] = node; divs.push(div); }
  });
  if (!window.Plotly) {
    divs.forEach(function (div) { fail(div, 'plotly.js is not in the page'); });
    return;
  }
  if (!('IntersectionObserver' in window)) {
    divs.forEach(draw);
    return;
  }
  var watch = new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (e.isIntersecting && shown(e.target)) { watch.unobserve(e.target); draw(e.target); }
    });
  }, {rootMargin: '300px 0px'});
  divs.forEach(function (div) { watch.observe(div); });
  Array.prototype.forEach.call(document.querySelectorAll('details'), function (d) {
    d.addEventListener('toggle', function () {
      if (!d.open) { return; }
      // observing again reports whether each figure is in view now
      Array.prototype.forEach.call(d.querySelectorAll('.figure'), function (div) {
        if (packed[div.id]) { watch.unobserve(div); watch.observe(div); }
      });
    });
  });
  window.addEventListener('beforeprint', function () {
    divs.forEach(function (div) { if (shown(div)) { draw(div); } });
  });
})();
"""

# The run selector: one run's block shown (and opened), or all of them.
LOADER = """
(function () {
  var pick = document.getElementById('run-select');
  if (!pick) { return; }
  pick.addEventListener('change', function () {
    var want = pick.value;
    Array.prototype.forEach.call(document.querySelectorAll('.run-block'), function (b) {
      var mine = want === '' || b.id === want;
      b.classList.toggle('hidden-run', !mine);
      if (mine && want !== '') { b.open = true; }
    });
    if (want !== '') { document.getElementById(want).scrollIntoView(); }
  });
})();
"""

# `show`: a sequence's tokens coloured by |r| (the colours of render/cell_text.HEAT_COLOURS)
HEAT_CSS = """
.heat { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size:13px;
  white-space:pre-wrap; word-break:break-word; line-height:1.9; max-width:1100px; }
.heat span[title] { cursor:help; border-radius:2px; }
.heat-gap { display:block; margin:6px 0; padding:2px 8px; color:#0b63c5; background:#eef4fb;
  border-left:3px solid #0b63c5; font-family:system-ui,sans-serif; }
.heat-masked { display:block; margin:-6px 0 6px; padding:2px 8px; color:#3d5a80; font-style:italic;
  background:#f6f8fb; border-left:3px solid #9cb8d9; }
.heat-legend span { padding:1px 6px; border-radius:3px; font-size:12px; }
.heat-1 { background:#fff3b0; } .heat-2 { background:#ffd166; } .heat-3 { background:#f79d5c; }
.heat-4 { background:#e8553e; color:#fff; } .heat-5 { background:#b3001b; color:#fff; }
.heat-0 { background:transparent; }
.heat-mark { text-decoration:underline wavy #0072B2; text-underline-offset:3px; }
"""
