"""The framework presets of ``whatif --preset``: ``base.py`` the state's common columns and
whatif's common numbers of them, one module per framework's correction beside it, and
``registry.py`` the list of every preset."""
