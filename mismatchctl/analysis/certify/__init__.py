"""`certify`: the exact worst tokens and sequences with their bounds (`certify.py`) and their
sections (`view.py`)."""
