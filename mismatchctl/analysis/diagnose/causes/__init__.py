"""The catalogue of causes `diagnose` can name, each a hypothesis weighed on one scale.

One module per cause (``template.py``, ``policy.py``...): what it is (its key, class and label,
the tokens it predicts hot and the shape of ``r`` there, what tells it from its neighbours), the
checks whose measures it reads, ``support(ctx)``: how much of the run's excess it explains on
this run, and ``advice``: the next step. ``catalogue.py`` lists them; ``weigh.py`` scores every
one on the same currency (the share of the excess explained, its specificity, the evidence
against it) and names the best supported, its runner-ups, and a second cause when one is
independently supported. The checks measure; no cause wins by its place in a list.
"""
