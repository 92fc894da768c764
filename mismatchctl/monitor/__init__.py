"""``Monitor``: per-step mismatch metrics from the trainer's tensors, reduced on their device,
stored as ``ingest`` stores a dump (docs/monitor.md).

::

    from mismatchctl import Monitor

    mon = Monitor("r7", store="mismatch-store", style="verl")
    mon.update(step, rollout_logprobs, trainer_logprobs, response_mask)
    wandb.log(mon.step_summary(prefix="mismatch/"), step=step)
    alerts = mon.flush()
"""

from __future__ import annotations

from mismatchctl.monitor.monitor import Monitor

__all__ = ["Monitor"]
