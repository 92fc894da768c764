"""diagnose's ``token_classes`` check: the classes of a tokenizer's ids (trained here, offline,
with the `tokenizers` library), the worst tokens' class counts and their expectation at the same
token probabilities against numpy on the stored rows, and the verdicts: a mismatch planted on
whitespace or special tokens fires (warn at a small magnitude, fail at a large one), a healthy run,
a numeric fault on the unlikely tokens (where byte pieces crowd) and a run without a tokenizer
stay quiet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mismatchctl
from mismatchctl import api
from mismatchctl.analysis.diagnose.checks.token_classes import T
from mismatchctl.analysis.token_classes import (
    BYTE,
    OTHER,
    SPECIAL,
    WHITESPACE,
    class_table,
)
from mismatchctl.analysis.tokenizer import HFDecoder, byte_text
from mismatchctl.dump import DumpWriter
from mismatchctl.stats import parse_bins
from mismatchctl.stats.bins import assign_bins
from tests.helpers import cli, slow_param
from tests.planted import diagnosis

tokenizers = pytest.importorskip("tokenizers")

SPECIALS = ["<|im_start|>", "<|im_end|>", "<tool_call>"]
TEXTS = [
    "The tool returned 42 results for the query.\n\n",
    "Let me check the weather in Paris first.   Then Zürich, São Paulo and Kraków.",
    "def add(a, b):\n    return a + b\n\t\n",
    "I will call the search tool again with a new query: naïve café.",
] * 4
REL = 1e-9


def train(path: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIALS, show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(TEXTS, trainer)
    tok.save(str(path))
    return tok


@pytest.fixture(scope="module")
def tok_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    train(path)
    return path


@pytest.fixture(scope="module")
def lut(tok_path: Path) -> np.ndarray:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_path))
    table = class_table(HFDecoder(tok, tok.get_vocab_size(with_added_tokens=True)))
    assert table is not None
    return table


def test_class_table(tok_path: Path, lut: np.ndarray) -> None:
    from tokenizers import Tokenizer, models

    tok = Tokenizer.from_file(str(tok_path))
    assert len(lut) == tok.get_vocab_size(with_added_tokens=True)
    assert sorted(np.flatnonzero(lut == SPECIAL)) == sorted(tok.token_to_id(t) for t in SPECIALS)
    for i in range(len(lut)):
        text = tok.decode([i], skip_special_tokens=False)
        if lut[i] == WHITESPACE:
            assert text.strip() == "" and text
        elif lut[i] == BYTE:  # a piece of a multi-byte character (ü, ã, ó, ï, é)
            assert "\ufffd" in text
    for text in ("\n", "\n\n", " ", "   ", "\t"):
        ids = tok.encode(text).ids
        assert all(lut[i] == WHITESPACE for i in ids), text
    assert (lut == BYTE).sum() >= 64 and (lut == OTHER).sum() > 100
    # SentencePiece's byte fallback: pieces named <0xNN>
    vocab = {"<unk>": 0, "<0x0A>": 1, "<0xC3>": 2, "a": 3, "▁": 4}
    sp = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    table = class_table(HFDecoder(sp, 5))
    assert table is not None and table.tolist() == [OTHER, BYTE, BYTE, OTHER, OTHER]
    table = class_table(byte_text)  # `--tokenizer bytes`
    assert table is not None
    assert [table[b] for b in b" \n\tA\xc3"] == [WHITESPACE] * 3 + [OTHER, BYTE]


def write_run(
    path: Path, lut: np.ndarray, plant: str, scale: float, share: float = 1 / 3, seed: int = 0
) -> Path:
    """600 responses of 60 tokens. Whitespace tokens are mostly likely ones (p 0.6-0.99), byte
    pieces nearly always unlikely ones (p < 0.3); healthy noise grows as the probability falls. ``plant``:
    ``whitespace`` or ``special`` (that class's tokens get |r| of ``scale`` on ``share`` of
    them), ``numeric`` (tokens with p < 0.05 get ``scale`` times the noise), ``none``."""
    rng = np.random.default_rng(seed)
    by_class = {c: np.flatnonzero(lut == c) for c in (BYTE, SPECIAL, WHITESPACE, OTHER)}
    n, length = 600, 60
    cls = rng.choice([WHITESPACE, SPECIAL, BYTE, OTHER], size=(n, length), p=[0.2, 0.03, 0.07, 0.7])
    ids = np.zeros((n, length), dtype=np.int64)
    for c, members in by_class.items():
        where = cls == c
        ids[where] = rng.choice(members, where.sum())
    likely = np.select([cls == WHITESPACE, cls == BYTE, cls == OTHER], [0.9, 0.03, 0.75], 0.5)
    p = np.where(rng.random((n, length)) < likely, rng.uniform(0.6, 0.99, (n, length)),
                 rng.uniform(1e-4, 0.3, (n, length)))  # fmt: skip
    lr = np.log(p)
    noise = rng.normal(0.0, 0.01 + 0.1 * (1 - p))
    if plant == "numeric":
        noise = np.where(p < 0.05, noise * scale, noise)
    elif plant in ("whitespace", "special"):
        target = (cls == (WHITESPACE if plant == "whitespace" else SPECIAL)) & (
            rng.random((n, length)) < share
        )
        noise = np.where(target, rng.choice([-1.0, 1.0], (n, length)) * scale, noise)
    lt = np.minimum(lr + noise, 0.0)
    with DumpWriter(path) as w:
        for step in range(3):
            rows = slice(step * n // 3, (step + 1) * n // 3)
            w.add(step, lr[rows], lt[rows], np.ones_like(lr[rows], dtype=bool),
                  token_ids=ids[rows],
                  sample_ids=[f"s{step}-{i}" for i in range(rows.start, rows.stop)])  # fmt: skip
    return path


PLANTS = {  # run -> (plant, scale, share)
    "healthy": ("none", 0.0, 0.0),
    "ws-small": ("whitespace", 1.0, 0.015),
    "ws-large": ("whitespace", 3.0, 1 / 3),
    "special": ("special", 2.0, 1 / 3),
    "numeric": ("numeric", 20.0, 0.0),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, tok_path: Path, lut: np.ndarray) -> Path:
    root = tmp_path_factory.mktemp("classes")
    for name, (plant, scale, share) in PLANTS.items():
        mismatchctl.ingest([write_run(root / name, lut, plant, scale, share)], run=name,
                           store=root / "store")  # fmt: skip
    mismatchctl.ingest([write_run(root / "plain", lut, "whitespace", 3.0)], run="plain",
                       store=root / "store")  # fmt: skip
    for name in PLANTS:
        api.tokens(name, top=1, tokenizer=str(tok_path), store=root / "store")
    return root / "store"


def _check(store: Path, run: str) -> Any:
    """The token_classes check of the run's diagnosis (diagnosed once: several tests read it)."""
    return next(c for c in diagnosis(store, run).checks if c.name == "token_classes")


def _reference(store: Path, run: str, lut: np.ndarray) -> dict:
    """The worst tokens by |r| (ties: step, seq, position), their classes, and each class's
    expected count at the same token probabilities, from the stored rows."""
    st = mismatchctl.open_store(store)
    t = pa.concat_tables(pq.read_table(st.part_path(p)) for p in st.parts(run))
    lr, lt = t["rollout_logprob"].to_numpy(), t["trainer_logprob"].to_numpy()
    step, seq, pos = t["step"].to_numpy(), t["seq"].to_numpy(), t["position"].to_numpy()
    cls = lut[t["token_id"].to_numpy()]
    bins = assign_bins(np.exp(lr), parse_bins("log"))
    k = int(min(max(round(T.CLASS_TOP_SHARE * len(lr)), T.CLASS_TOP_LEAST), T.CLASS_TOP_MOST))
    top = np.lexsort((pos, seq, step, -np.abs(lt - lr)))[:k]
    nb = len(parse_bins("log")) - 1
    out = {"k": k}
    for c, name in ((BYTE, "byte"), (SPECIAL, "special"), (WHITESPACE, "whitespace")):
        share = np.array([(cls[bins == b] == c).mean() if (bins == b).any() else 0.0
                          for b in range(nb)])  # fmt: skip
        top_b = np.bincount(bins[top], minlength=nb)
        out[name] = {
            "worst": int((cls[top] == c).sum()),
            "expected": float(top_b @ share),
            "se": float(np.sqrt(top_b @ (share * (1 - share)))),
            "share_of_tokens": float((cls == c).mean()),
        }
    return out


@pytest.mark.parametrize(
    "run", [r if r in ("healthy", "ws-large", "numeric") else slow_param(r) for r in PLANTS]
)
def test_counts_against_numpy(store: Path, lut: np.ndarray, run: str) -> None:
    check = _check(store, run)
    want = _reference(store, run, lut)
    ev = check.evidence
    assert ev.worst_tokens == want["k"] == 360
    assert ev.classified_tokens == 36_000 and ev.unclassified_tokens == 0
    for name in ("byte", "special", "whitespace"):
        got, ref = ev.classes[name], want[name]
        assert got.worst == ref["worst"], (run, name)
        assert got.expected == pytest.approx(ref["expected"], rel=REL)
        assert got.se == pytest.approx(ref["se"], rel=REL)
        assert got.share_of_tokens == pytest.approx(ref["share_of_tokens"], rel=REL)


def test_a_mismatch_on_whitespace_tokens_fires(store: Path) -> None:
    small, large = _check(store, "ws-small"), _check(store, "ws-large")
    assert small.verdict == "warn" and large.verdict == "fail"
    for check in (small, large):
        assert check.evidence.over_represented == ["whitespace"]
        assert check.finding.startswith("whitespace-only tokens: ")
        assert "expected at the same token probabilities" in check.finding
        assert check.next is not None and "re-tokenizes" in check.next
    whitespace = large.evidence.classes["whitespace"]
    assert whitespace.share_of_worst >= T.CLASS_FAIL_SHARE
    assert all(e.text.replace("\\n", "").replace("\\t", "").strip() == ""
               for e in whitespace.examples)  # fmt: skip
    cause = next(c for c in api.diagnose("ws-large", store=store).checks if c.name == "cause")
    assert cause.evidence.cause == "template" and "token_classes" in cause.evidence.named.checks


def test_a_mismatch_on_special_tokens_fires(store: Path) -> None:
    check = _check(store, "special")
    assert check.verdict in ("warn", "fail")
    assert check.evidence.over_represented == ["special"]
    texts = {e.text for e in check.evidence.classes["special"].examples}
    assert texts <= set(SPECIALS) and texts


def test_healthy_and_numeric_faults_stay_quiet(store: Path) -> None:
    """The numeric fault puts the worst tokens among the unlikely ones, where byte pieces crowd:
    their share among the worst is far above their share of all tokens, but not above what the
    same token probabilities predict."""
    for run in ("healthy", "numeric"):
        check = _check(store, run)
        assert check.verdict == "ok", (run, check.finding)
        assert check.finding.startswith("no class is over-represented among the 360")
    byte = _check(store, "numeric").evidence.classes["byte"]
    assert byte.share_of_worst > 2 * byte.share_of_tokens


def test_without_a_tokenizer_it_is_not_applicable(store: Path) -> None:
    check = _check(store, "plain")
    assert check.verdict == "n/a" and "no tokenizer remembered" in check.finding
    ran = cli("diagnose", "plain", "--store", str(store))
    assert "Token classes" in ran.out


def test_diagnose_reads_a_tokenizer_given_to_it(
    tmp_path: Path, tok_path: Path, lut: np.ndarray
) -> None:
    """`diagnose --tokenizer` classifies without an earlier `tokens --tokenizer`, and remembers
    it for the run (the next diagnosis uses it without the option)."""
    store = tmp_path / "store"
    mismatchctl.ingest([write_run(tmp_path / "d", lut, "whitespace", 3.0)], run="d", store=store)
    ran = cli("diagnose", "d", "--tokenizer", str(tok_path), "--store", str(store), "--json", "-")
    checks = {c["name"]: c for c in json.loads(ran.out)["diagnosis"]["checks"]}
    assert checks["token_classes"]["verdict"] == _check(store, "d").verdict == "fail"
    ran = cli("diagnose", "d", "--tokenizer", str(tmp_path / "none.json"), "--store", str(store))
    assert ran.code == 1 and "none.json" in ran.err and "Hint" in ran.err
