"""The worst sequences of a report's HTML page (`worst.py`) and their sections (`view.py`)."""
