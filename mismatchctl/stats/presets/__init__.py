"""The framework presets of ``whatif --preset``: ``base.py`` the state's common columns and
whatif's common numbers of them (and the list of every preset), one module per framework's
correction beside it."""
