"""Localization of ``explain``: where the K3 mass of a selection is, and what explains its
difference from a baseline, on the cube's cell aggregates (docs/explain.md). ``explain.py`` runs
it; the other modules are its steps (the search, the regions, the refinement, the findings)."""
