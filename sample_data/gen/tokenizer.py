"""The sample model's tokenizer as a `tokenizer.json`: byte-level, id i = byte i.

`TinyLM` reads raw bytes (vocabulary 256), so its tokenizer is the identity on bytes. Written with
the `tokenizers` library in the GPT-2 byte-level convention (a BPE model without merges whose
vocabulary spells each byte by its printable stand-in, a ByteLevel pre-tokenizer and decoder), so
that any tokenizer.json reader decodes the sample runs' ids: `Tokenizer.decode(ids)` gives the
text back, multi-byte UTF-8 characters included. Nothing is trained or downloaded.

    python sample_data/gen/tokenizer.py sample_data/tokenizer.json

`generate.py` writes it beside the manifest and names it there (`"tokenizer"`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

FILE_NAME = "tokenizer.json"


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in of each byte (`bytes_to_unicode`), indexed by byte: printable
    Latin-1 bytes stand for themselves, the others for code points from 256 on, in byte order."""
    printable = {*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    out, extra = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def byte_tokenizer() -> Tokenizer:
    """The byte-level tokenizer: encodes text to its UTF-8 bytes, decodes bytes to text."""
    vocab = {piece: i for i, piece in enumerate(byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # no regex split: a byte is a token whatever surrounds it
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def write_tokenizer(path: Path) -> Path:
    """The tokenizer's JSON at `path` (the library's pretty form, a final newline)."""
    path.write_text(byte_tokenizer().to_str(pretty=True) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / FILE_NAME
    print(write_tokenizer(target))
