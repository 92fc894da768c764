"""Canonical columns of the store: the one place where their names live.

A *token row* is one model-generated token (mask = 1) of one sequence. Prompt, tool-response and
padding positions are never stored as rows; their counts are kept per sequence in the *sequence
rows*. Both tables carry ``seq``, a dense integer id of the sequence within its run, assigned at
ingest, so that sequence boundaries are cheap to find.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 3  # 2: sequence rows gained `entropy`; 3: token rows `entropy`, sequence rows
# `batch_id` and `batch_size`
# Versions a reader reads: a version 2 store's parts lack version 3's columns (read as null); a
# write to it makes it version 3 (its new parts may hold them).
READ_VERSIONS = (2, 3)
# Later additions are nullable columns a reader takes as unknown when a part lacks them (the
# version is unchanged): sequence rows' `prompt_length` and `attr.<name>` columns.

# --- token rows ---------------------------------------------------------------------------
RUN = "run"  # not stored inside part files: it is the hive partition key (run=<name>)
STEP = "step"
SEQ = "seq"
SAMPLE_ID = "sample_id"
TURN = "turn"
POSITION = "position"
TOKEN_ID = "token_id"
ROLLOUT = "rollout_logprob"
TRAINER = "trainer_logprob"
GPU = "gpu"
# per-token entropy (nats) of the trainer's distribution, when the dump has one per token (null
# otherwise; parts written before version 3 lack the column: null too)
TOKEN_ENTROPY = "entropy"

# A sequence's key, the first columns of its token rows and of its sequence row: its step, its
# dense id in the run, and the dump's sample id
SEQUENCE_KEY = (
    pa.field(STEP, pa.int64(), nullable=False),
    pa.field(SEQ, pa.int64(), nullable=False),
    pa.field(SAMPLE_ID, pa.string(), nullable=False),
)

TOKEN_SCHEMA = pa.schema(
    [
        *SEQUENCE_KEY,
        pa.field(TURN, pa.int32(), nullable=False),
        pa.field(POSITION, pa.int32(), nullable=False),
        pa.field(TOKEN_ID, pa.int64(), nullable=True),
        pa.field(ROLLOUT, pa.float64(), nullable=False),
        pa.field(TRAINER, pa.float64(), nullable=False),
        pa.field(GPU, pa.string(), nullable=True),
        pa.field(TOKEN_ENTROPY, pa.float64(), nullable=True),
    ]
)


def dictionary_strings(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its string columns as dictionaries: how rows reach the part writer."""
    return pa.schema(
        [
            pa.field(f.name, pa.dictionary(pa.int32(), pa.string()), f.nullable)
            if pa.types.is_string(f.type)
            else f
            for f in schema
        ]
    )


# Token rows as ingest hands them to the part writer: each token's copy of its sequence's sample id
# and gpu is a dictionary index (no string copied, hashed or compared per token). Part files are
# written without the Arrow schema, so every reader sees the plain strings of TOKEN_SCHEMA.
TOKEN_ROWS_SCHEMA = dictionary_strings(TOKEN_SCHEMA)

# --- sequence rows ------------------------------------------------------------------------
MODEL_TOKENS = "model_tokens"  # T_i
TURNS = "turns"  # number of model turns (maximal runs of model tokens)
PROMPT_TOKENS = "prompt_tokens"  # masked positions before the first model token
TOOL_TOKENS = "tool_tokens"  # masked positions between model tokens (tool responses)
PAD_TOKENS = "pad_tokens"  # masked positions after the last model token (padding)
REWARD = "reward"
ENTROPY = "entropy"  # mean per-token entropy (nats) over the model tokens
WEIGHT_VERSION = "weight_version"
WEIGHT_LAG = "weight_lag"  # step - weight_version when both are known
# tokens before position 0 of the sequence's arrays (the KV cache at its first position); null
# when the dump does not say (parts written before it existed lack the column: unknown too)
PROMPT_LENGTH = "prompt_length"
# the batch (engine or micro-batch) a sequence was computed in, and that batch's size in
# sequences, when the dump says (null otherwise; parts written before version 3 lack them)
BATCH_ID = "batch_id"
BATCH_SIZE = "batch_size"
# a per-sequence attribute of the dump (``data_source``, ``dp_rank``...), as text: one nullable
# string column ``attr.<name>`` per attribute a source has
ATTR_COLUMN_PREFIX = "attr."

SEQUENCE_SCHEMA = pa.schema(
    [
        *SEQUENCE_KEY,
        pa.field(GPU, pa.string(), nullable=True),
        pa.field(MODEL_TOKENS, pa.int64(), nullable=False),
        pa.field(TURNS, pa.int32(), nullable=False),
        pa.field(PROMPT_TOKENS, pa.int64(), nullable=False),
        pa.field(TOOL_TOKENS, pa.int64(), nullable=False),
        pa.field(PAD_TOKENS, pa.int64(), nullable=False),
        pa.field(REWARD, pa.float64(), nullable=True),
        pa.field(ENTROPY, pa.float64(), nullable=True),
        pa.field(WEIGHT_VERSION, pa.int64(), nullable=True),
        pa.field(WEIGHT_LAG, pa.int64(), nullable=True),
        pa.field(PROMPT_LENGTH, pa.int64(), nullable=True),
        pa.field(BATCH_ID, pa.int64(), nullable=True),
        pa.field(BATCH_SIZE, pa.int64(), nullable=True),
    ]
)


def attribute_column(name: str) -> str:
    """The sequence rows' column of attribute ``name``."""
    return ATTR_COLUMN_PREFIX + name


def attribute_names(names: list[str]) -> list[str]:
    """The attributes among a sequence part's column names."""
    return [n[len(ATTR_COLUMN_PREFIX) :] for n in names if n.startswith(ATTR_COLUMN_PREFIX)]


def sequence_schema(attributes: list[str] | tuple[str, ...] = ()) -> pa.Schema:
    """The sequence rows of a source with these attributes: ``SEQUENCE_SCHEMA`` and one
    nullable string column per attribute."""
    extra = [pa.field(attribute_column(a), pa.string(), nullable=True) for a in attributes]
    return pa.schema([*SEQUENCE_SCHEMA, *extra])


# --- routing rows (MoE; ``routing/`` parts, row for row beside a source's token parts) --------
# per model token: the bitmask of layers whose top-k expert sets agree (null: the token's row is
# not recorded on both sides), the per-layer overlap |A ∩ B| (one byte per layer), the
# comparison of the row that produced its logprob (-1 unpaired, 0 same, 1 flipped), whether a
# compared row before its own differs; the full routes only with ``--keep-routes``
ROUTE_EQUAL = "route_layers_equal"
ROUTE_OVERLAP = "route_overlap"
ROUTE_PAIRED = "route_paired"
ROUTE_FLIP_BEFORE = "route_flip_before"
ROUTE_TOP_K = "route_top_k"  # the routes' top-k (one value per source; the overlaps' scale)
# the layers agreeing when the trainer's own row is set against the rollout's a position before,
# a position after, a layer below and a layer above (four bytes; 255: not compared): the test
# of the routes' alignment (docs/metrics.md, "Routing"; absent from parts written before it)
ROUTE_SHIFTED = "route_shifted"
ROLLOUT_ROUTES = "rollout_routes"
TRAINER_ROUTES = "trainer_routes"


def routing_schema(layers: int, top_k: int, keep_routes: bool) -> pa.Schema:
    """The routing rows of a source whose routes have ``layers`` x ``top_k`` experts."""
    fields = [
        pa.field(STEP, pa.int64(), nullable=False),
        pa.field(SEQ, pa.int64(), nullable=False),
        pa.field(POSITION, pa.int32(), nullable=False),
        pa.field(ROUTE_EQUAL, pa.uint64(), nullable=True),
        pa.field(ROUTE_OVERLAP, pa.binary(layers), nullable=True),
        pa.field(ROUTE_PAIRED, pa.int8(), nullable=False),
        pa.field(ROUTE_FLIP_BEFORE, pa.bool_(), nullable=False),
        pa.field(ROUTE_TOP_K, pa.uint8(), nullable=False),
        pa.field(ROUTE_SHIFTED, pa.binary(4), nullable=False),
    ]
    if keep_routes:
        width = layers * top_k
        fields += [
            pa.field(ROLLOUT_ROUTES, pa.list_(pa.int32(), width), nullable=False),
            pa.field(TRAINER_ROUTES, pa.list_(pa.int32(), width), nullable=False),
        ]
    return pa.schema(fields)


# --- masked rows (``masked/`` parts): the token ids of the masked positions between a
# sequence's first and last model token (its tool responses), when the dump has token ids
MASKED_SCHEMA = pa.schema(
    [
        pa.field(STEP, pa.int64(), nullable=False),
        pa.field(SEQ, pa.int64(), nullable=False),
        pa.field(POSITION, pa.int32(), nullable=False),
        pa.field(TOKEN_ID, pa.int64(), nullable=False),
    ]
)


# --- input roles (what ``--map ROLE=COLUMN`` names) ---------------------------------------
ROLE_ROLLOUT = "rollout"
ROLE_TRAINER = "trainer"
ROLE_MASK = "mask"
ROLE_TOKENS = "tokens"
ROLE_STEP = "step"
ROLE_SAMPLE_ID = "sample_id"
ROLE_GPU = "gpu"
ROLE_TURN = "turn"
ROLE_POSITION = "position"
ROLE_REWARD = "reward"
ROLE_ENTROPY = "entropy"
ROLE_WEIGHT_VERSION = "weight_version"
ROLE_ROLLOUT_ROUTES = "rollout_routes"  # routed experts of the inference engine
ROLE_TRAINER_ROUTES = "trainer_routes"  # routed experts of the trainer
# per-sequence integers, read from the dump's per-sequence columns (those attributes are read
# from: ``ingest.batches``)
ROLE_BATCH_ID = "batch_id"
ROLE_BATCH_SIZE = "batch_size"
BATCH_ROLES = (ROLE_BATCH_ID, ROLE_BATCH_SIZE)
ROLES = (
    ROLE_ROLLOUT,
    ROLE_TRAINER,
    ROLE_MASK,
    ROLE_TOKENS,
    ROLE_STEP,
    ROLE_SAMPLE_ID,
    ROLE_GPU,
    ROLE_TURN,
    ROLE_POSITION,
    ROLE_REWARD,
    ROLE_ENTROPY,
    ROLE_WEIGHT_VERSION,
    ROLE_ROLLOUT_ROUTES,
    ROLE_TRAINER_ROUTES,
    ROLE_BATCH_ID,
    ROLE_BATCH_SIZE,
)

# Logprobs above this are rounding noise at most; anything larger is an error.
LOGPROB_MAX = 1e-4
# Entropies below this are an error (an entropy is >= 0; allow rounding noise).
ENTROPY_MIN = -1e-6

# Tag names with a meaning of their own.
TAG_GPU = "gpu"
TAG_ROUTING_REPLAY = "routing_replay"  # `r3`: the trainer replays the engine's routes
