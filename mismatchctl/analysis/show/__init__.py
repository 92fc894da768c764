"""`show`: one sequence token by token (`show.py`) and its sections (`view.py`)."""
