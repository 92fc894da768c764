"""The checks of `diagnose`, one module each, and nothing else (``diagnose/registry.py`` takes
every module here for a check). Each declares its ``NAME`` (as the JSON names it), ``LAYER``,
``TITLE``, ``ORDER`` (where the diagnosis lists it), ``READS`` (the check modules whose results
it reads, or ``Every`` check of an earlier layer), ``Thresholds`` (its own, each documented;
those that several checks share are in ``diagnose/levels.py``), ``Evidence`` (what it measured,
a frozen dataclass of ``check.CheckEvidence``: its fields are its JSON's keys) and ``run(ctx)``."""
