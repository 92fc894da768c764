"""`tokens`: the worst tokens and sequences (`tokens.py`), their sections (`view.py`) and a listed
token's context as text (`text.py`)."""
