"""The paired comparison of `compare` (sequences of both sides matched by content): the result
(`pairing.py`) and its sections (`view.py`)."""
