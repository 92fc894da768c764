"""`report`: the result (`report.py`), its sections (`view.py`), and what the engine computes
beside the metrics in the same read (`figure_data.py`, `sequences.py`)."""
