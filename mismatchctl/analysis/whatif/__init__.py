"""`whatif`: the corrections' result (`whatif.py`), a framework's preset (`preset.py`), whether a
correction discards the signal (`remedy.py`), and their sections (`view.py`)."""
