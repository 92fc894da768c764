"""Writing dumps from any trainer: ``DumpWriter`` (numpy and pyarrow; torch tensors accepted when
torch is there, never required).

::

    from mismatchctl.dump import DumpWriter

    with DumpWriter("dumps/run7", tags={"gpu": "H20", "engine": "vllm-0.18.1"}) as writer:
        for step, batch in enumerate(training):
            ...
            writer.add(step, rollout_logprobs, trainer_logprobs, response_mask,
                       token_ids=responses, sample_ids=uids, rewards=scores)

    # then: mismatchctl ingest dumps/run7 --run run7

The layout and every argument: docs/dump.md.
"""

from __future__ import annotations

from mismatchctl.dump.writer import DumpWriter

__all__ = ["DumpWriter"]
