"""The report's MoE Routing section: the result (`routing.py`), its sections (`view.py`) and a
token's routing kind (`kinds.py`, light: read by `show`)."""
