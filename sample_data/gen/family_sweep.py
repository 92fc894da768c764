"""One knob of each fault class turned through its range (family.py --sweep): a held-out check of
`diagnose` at the sizes between the catalogue's subtle and loud ones, and beyond them, from
about the healthy level to a thousand times it. Made after every threshold was set; no threshold
is set from it.

Each run changes one knob where the fault happens in a real stack, at a value a real stack could
have (none is a healthy run's mismatch scaled): the engine's temperature against the trainer's
1.0; a top-p the engine renormalises its logprobs by; a repetition penalty the engine alone
applies; weights a fraction of an RL step behind (the step's checkpoint moved that far back
toward the previous one: ``behind:F``); a split-KV decode whose partials merge by fp8
log-sum-exps, or whose second partial starts a key late, from a KV length that sets how many
tokens take the path; one device of four with such a kernel; the trainer's copy of each tool
response rendered otherwise, each of the renderings the family's catalogue does not use (its
template fault is the opening tag's); and pairs of two knobs at sizes the catalogue's pairs do
not have. The planted class of each is the fix a user should be told
to make; the ``size`` column is ``subtle`` under about 5x the baseline's vllm_kl by the knob's
expected reach and ``loud`` above it (the corpus records the measured ratio).

Every run's baseline is ``f-h-a`` (``f-h-b`` beside it, for the healthy pair)."""

from __future__ import annotations

import torch

from gen.edits import RENDERS
from gen.family_engine import EngineKernel, Sampler
from gen.family_runs import FAMILY, FP8KV, FamilyRun, fault

BASELINES: tuple[FamilyRun, ...] = tuple(r for r in FAMILY if r.name in ("f-h-a", "f-h-b"))


def _knob(key: str, value: float, size: str) -> FamilyRun:
    """One knob of the sampler or the weights at one value: ``s-KEY-VALUE``."""
    cause, what, settings = {
        "temp": (
            "semantics",
            f"the engine samples at {value:g}, the trainer scores at 1.0",
            {"sampler": Sampler(temperature=value), "trainer_temperature": 1.0},
        ),
        "topp": (
            "semantics",
            f"top-p {value:g}, processed logprobs",
            {"sampler": Sampler(top_p=value)},
        ),
        "rep": (
            "semantics",
            f"a repetition penalty of {value:g} in the engine only",
            {"sampler": Sampler(repetition_penalty=value)},
        ),
        "behind": (
            "policy",
            f"the engine's weights {value:g} of an RL step behind the trainer's",
            {"weights": f"behind:{value:g}"},
        ),
    }[key]
    return fault(f"s-{key}-{value:g}", cause, size, what, **settings)


def _kernel(at: int, drop: bool) -> EngineKernel:
    if drop:
        return EngineKernel(split_at=at, drop_key=True)
    return EngineKernel(split_at=at, lse_dtype=torch.float8_e4m3fn)


def _split(at: int, size: str, drop: bool, gpu: bool = False) -> FamilyRun:
    """A split-KV decode past ``at`` keys on every device, or (``gpu``) on one device of four."""
    kind = "the second partial a key late" if drop else "partials merged by fp8 log-sum-exps"
    name = f"s-{'gpu-' if gpu else ''}split{'drop' if drop else 'fp8'}-{at}"
    what = f"{'one device of four: ' if gpu else ''}split-KV decode past {at} keys, {kind}"
    if gpu:
        kernels = {"gpus": 4, "faulty_gpu": 1, "gpu_kernel": _kernel(at, drop)}
        return fault(name, "hardware", size, what, **kernels)  # type: ignore[arg-type]
    return fault(name, "code_path", size, what, kernel=_kernel(at, drop))


TEMPERATURES = ((0.995, "subtle"), (0.99, "subtle"), (0.95, "loud"), (0.9, "loud"), (0.8, "loud"),
                (0.5, "loud"))  # fmt: skip
TOP_PS = ((0.995, "subtle"), (0.99, "subtle"), (0.95, "loud"), (0.8, "loud"), (0.6, "loud"))
PENALTIES = ((1.005, "subtle"), (1.01, "subtle"), (1.05, "loud"), (1.2, "loud"), (1.5, "loud"))
FRACTIONS = ((0.02, "subtle"), (0.1, "subtle"), (0.25, "loud"), (0.5, "loud"))

TEMPLATES = {  # gen/edits.RENDERS: the trainer's copy of each tool response
    "crlf": "its final newline written as CRLF",
    "strip-newline": "its final newline dropped",
    "wrapper": "wrapped in other tags than the engine's",
    "escaped-quotes": "its quotes escaped as HTML",
}


def _template(render: str) -> FamilyRun:
    assert render in RENDERS, render
    what = f"the trainer's copy of each tool response {TEMPLATES[render]}"
    return fault(f"s-tpl-{render}", "template", "loud", what, render=render)


SWEEP: tuple[FamilyRun, ...] = (
    *BASELINES,
    *(_knob("temp", t, s) for t, s in TEMPERATURES),
    *(_knob("topp", p, s) for p, s in TOP_PS),
    *(_knob("rep", r, s) for r, s in PENALTIES),
    *(_knob("behind", f, s) for f, s in FRACTIONS),
    _split(64, "loud", drop=False),
    _split(224, "subtle", drop=False),
    _split(64, "loud", drop=True),
    _split(160, "subtle", drop=True),
    _split(224, "subtle", drop=True),
    _split(128, "subtle", drop=False, gpu=True),
    _split(96, "loud", drop=True, gpu=True),
    *(_template(r) for r in TEMPLATES),
    fault(
        "s-pair-behind-temp",
        "semantics+policy",
        "subtle",
        "weights 0.1 of an RL step behind beside temperature 0.99 vs 1.0",
        weights="behind:0.1",
        sampler=Sampler(temperature=0.99),
        trainer_temperature=1.0,
    ),
    fault(
        "s-pair-behind-split",
        "policy+code_path",
        "subtle",
        "weights 0.1 of an RL step behind beside fp8-merged split-KV past 160 keys",
        weights="behind:0.1",
        kernel=_kernel(160, drop=False),
    ),
    fault(
        "s-pair-rep-fp8kv",
        "semantics+precision",
        "loud",
        "a repetition penalty of 1.05 in the engine beside an fp8 KV cache",
        sampler=Sampler(repetition_penalty=1.05),
        kernel=FP8KV,
    ),
    fault(
        "s-pair-topp-gpu",
        "semantics+hardware",
        "loud",
        "top-p 0.95 beside one device of four splitting KV past 96 keys a key late",
        sampler=Sampler(top_p=0.95),
        gpus=4,
        faulty_gpu=1,
        gpu_kernel=_kernel(96, drop=True),
    ),
    fault(
        "s-pair-tpl-gpu",
        "template+hardware",
        "loud",
        "the trainer's copy of each tool response its final newline written as CRLF beside one "
        "device of four splitting KV past 96 keys a key late",
        render="crlf",
        gpus=4,
        faulty_gpu=1,
        gpu_kernel=_kernel(96, drop=True),
    ),
    fault(
        "s-pair-behind-gpu",
        "policy+hardware",
        "loud",
        "weights 0.5 of an RL step behind beside one device of four with an fp8 KV cache",
        weights="behind:0.5",
        gpus=4,
        faulty_gpu=1,
        gpu_kernel=FP8KV,
    ),
)
