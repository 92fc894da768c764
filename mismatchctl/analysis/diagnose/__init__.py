"""`diagnose`: every check of the five layers on one selection, from one read of the store.

The layers follow the lesson of the vLLM V0 -> V1 migration (BACKGROUND.md): rule out data
problems and *semantic* mismatch (the two sides computing different distributions), then locate
the *inference-path* mismatch (tokens, turns, hardware) and its *trajectory*, and only then ask
whether an *objective*-side correction is warranted.

One check is one module of ``checks/`` (its name, layer, title, the checks whose results it
reads, its thresholds and ``run``); ``registry.py`` lists them and orders their run; ``build.py``
reads the store once and runs them; ``diagnosis.py`` is the result and ``view.py`` its sections.
What several checks share: ``check.py`` (verdicts, layers, the ``Check`` result), ``context.py``
(what the checks read), ``levels.py`` (the thresholds several checks share), ``contrasts.py``,
``parts.py``, ``steps.py``, ``runs.py``, ``advice.py`` and the other small modules beside them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mismatchctl import lazy

if TYPE_CHECKING:
    from mismatchctl.analysis.diagnose.build import build_diagnosis
    from mismatchctl.analysis.diagnose.diagnosis import Diagnosis

# Loaded on first use (PEP 562): the modules that only need a threshold of diagnose (``levels``,
# ``corrections``: the gate, whatif's remedy sanity) do not load every check and the whatif
# they read.
_HOME = {"Diagnosis": f"{__name__}.diagnosis", "build_diagnosis": f"{__name__}.build"}


def __getattr__(name: str) -> Any:
    return lazy.load(__name__, globals(), _HOME, name)


__all__ = ["Diagnosis", "build_diagnosis"]
