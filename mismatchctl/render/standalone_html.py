"""A standalone HTML page around a fragment (what-if, diagnosis): the report's style and figure
loader, plotly.js inlined once (no network access needed)."""

from __future__ import annotations

import html

from plotly.offline import get_plotlyjs

from mismatchctl import __version__
from mismatchctl.render.report_html_style import CSS, LOADER, ONERROR


def standalone_page(title: str, subtitle: str, fragment: str) -> str:
    """``fragment`` is trusted HTML (renderers escape every user string in it)."""
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        f"<script>{ONERROR}</script><script>{get_plotlyjs()}</script></head><body>"
        f"<header><h1>{html.escape(title)}</h1><p class='sub'>{html.escape(subtitle)}</p>"
        f"</header><main>{fragment}</main>"
        f"<footer>mismatchctl {html.escape(__version__)}. Metric definitions: docs/metrics.md."
        f"</footer><script>{LOADER}</script></body></html>"
    )
