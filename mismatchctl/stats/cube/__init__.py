"""The K3 cube: the mergeable state of K3 mass over every conjunction of up to three dimensions
(``cube.py``), its layout (``spec.py``), the sequences' cells (``cells.py``), the compiled walks
(``kernels.py``), one part's cube (``part.py``) and the sequence bootstrap of its findings
(``bootstrap.py``)."""
