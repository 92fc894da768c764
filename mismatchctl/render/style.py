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

# Before plotly.js, so that even an error while loading it is recorded.
ONERROR = """
window.__mismatchErrors = [];
window.addEventListener('error', function (e) {
  window.__mismatchErrors.push(String(e.message || e));
  document.documentElement.setAttribute('data-js-errors', window.__mismatchErrors.join(' | '));
});
"""

LOADER = """
(function () {
  var config = {responsive: true, displaylogo: false,
                modeBarButtonsToRemove: ['select2d', 'lasso2d']};
  function fail(div, err) {
    div.className += ' fig-error';
    div.textContent = 'This figure could not be drawn: ' + err;
    window.__mismatchErrors.push(String(err));
    document.documentElement.setAttribute('data-js-errors', window.__mismatchErrors.join(' | '));
  }
  var blocks = document.querySelectorAll('script[type="application/json"][data-figure]');
  Array.prototype.forEach.call(blocks, function (node) {
    var div = document.getElementById(node.getAttribute('data-figure'));
    try {
      var fig = JSON.parse(node.textContent);
      Plotly.newPlot(div, fig.data, fig.layout, config).catch(function (err) { fail(div, err); });
    } catch (err) {
      fail(div, err);
    }
  });
  function resizeIn(el) {
    Array.prototype.forEach.call(el.querySelectorAll('.figure'), function (div) {
      if (div.data) { Plotly.Plots.resize(div); }
    });
  }
  // figures drawn while folded take their size when the block opens
  Array.prototype.forEach.call(document.querySelectorAll('details.block'), function (d) {
    d.addEventListener('toggle', function () { if (d.open) { resizeIn(d); } });
  });
  var pick = document.getElementById('run-select');
  if (pick) {
    pick.addEventListener('change', function () {
      var want = pick.value;
      Array.prototype.forEach.call(document.querySelectorAll('.run-block'), function (b) {
        var mine = want === '' || b.id === want;
        b.classList.toggle('hidden-run', !mine);
        if (mine && want !== '') { b.open = true; resizeIn(b); }
      });
      if (want !== '') { document.getElementById(want).scrollIntoView(); }
    });
  }
})();
"""

# `show`: a sequence's tokens coloured by |r| (the colours of render/text.HEAT_COLOURS)
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
