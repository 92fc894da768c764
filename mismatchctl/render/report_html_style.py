"""Static CSS and scripts of the HTML report (no data, no user strings)."""

from __future__ import annotations

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --soft:#f6f8fa; }
* { box-sizing: border-box; }
body { margin:0; color:var(--fg); background:var(--bg);
  font:14px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif; }
header { padding:24px 32px 12px; border-bottom:1px solid var(--line); }
h1 { font-size:22px; margin:0 0 8px; word-break:break-word; }
h2 { font-size:18px; margin:0 0 6px; }
h3 { font-size:15px; margin:18px 0 6px; word-break:break-word; }
.sub, .how, .note, footer { color:var(--muted); }
.how { margin:0 0 8px; max-width:980px; }
.runs { display:flex; flex-wrap:wrap; gap:8px; }
.run { border:1px solid var(--line); border-radius:6px; padding:2px 8px; background:var(--soft);
  word-break:break-word; }
.tag { margin-left:8px; font-family:ui-monospace,SFMono-Regular,Menlo,monospace; font-size:12px;
  color:var(--muted); }
nav { position:sticky; top:0; z-index:10; background:rgba(255,255,255,0.96);
  border-bottom:1px solid var(--line); padding:8px 32px; display:flex; flex-wrap:wrap; gap:4px 16px; }
nav a { color:#0969da; text-decoration:none; font-size:13px; }
nav a:hover { text-decoration:underline; }
main { padding:8px 32px 32px; max-width:1320px; }
section { padding:20px 0 12px; border-bottom:1px solid var(--line); scroll-margin-top:48px; }
.figure { width:100%; min-height:300px; }
.fig-error { color:#b42318; padding:16px; border:1px dashed #b42318; }
table { border-collapse:collapse; font-variant-numeric:tabular-nums; margin:4px 0 8px; }
th, td { padding:3px 10px; border-bottom:1px solid var(--line); white-space:nowrap; }
th { background:var(--soft); font-weight:600; }
tbody tr:nth-child(even) { background:#fafbfc; }
td.l, th.l { text-align:left; white-space:normal; word-break:break-word; }
td.n, th.n { text-align:right; }
.band { font-weight:600; }
.band-low, .kl-low { color:#1a7f37; }
.band-medium, .kl-medium { color:#9a6700; }
.band-high, .kl-high { color:#bc4c00; font-weight:600; }
.band-severe, .kl-severe { color:#cf222e; font-weight:700; }
.hot { color:#cf222e; font-weight:700; }
.scroll { max-height:520px; overflow:auto; border:1px solid var(--line); }
ul.events { margin:4px 0 10px; padding-left:20px; }
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
})();
"""
