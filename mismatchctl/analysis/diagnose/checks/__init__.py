"""The checks of `diagnose`, one module each: its ``NAME`` (as the JSON names it), ``LAYER``,
``TITLE``, ``READS`` (the check modules whose results it reads), ``Thresholds`` (its own, each
documented; those several checks share are in ``diagnose/levels.py``) and ``run(ctx)``.
``diagnose/registry.py`` lists them and orders their run from what they read."""
