"""The checks of `diagnose`, one module each, and nothing else (``diagnose/registry.py`` takes
every module here for a check). Each declares its ``NAME`` (as the JSON names it), ``LAYER``,
``TITLE``, ``ORDER`` (where the diagnosis lists it), ``READS`` (the check modules whose results
it reads, or ``Every`` check of an earlier layer), ``Thresholds`` (its own, each documented;
those that several checks share are in ``diagnose/levels.py``) and ``run(ctx)``."""
