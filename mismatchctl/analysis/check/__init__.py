"""`check`: the gate of thresholds (`check.py`), the metrics it can judge (`metrics.py`, light:
read for the help) and its sections (`view.py`)."""
