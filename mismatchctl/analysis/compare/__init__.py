"""`compare`: the result of two sides (`compare.py`), its sections (`view.py`), their training
curves (`curves.py`) and the answer when both hold the same data (`same.py`)."""
