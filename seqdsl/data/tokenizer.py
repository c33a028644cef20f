"""Tokenizers: UTF-8 bytes (no file needed) or any Hugging Face `tokenizer.json`.

Documents are packed end to end with one end-of-document token between them: `<|endoftext|>` (or
the tokenizer's `</s>` / `<eos>`) for a tokenizer file, byte 0 (NUL, which text never contains)
for bytes. For bits per byte, that token stands for one byte.
"""

from __future__ import annotations

from pathlib import Path

from seqdsl.errors import SeqError, SeqFileError

BYTES = "bytes"
EOS_NAMES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


class ByteTokenizer:
    name = BYTES
    vocab_size = 256
    eos_id = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class FileTokenizer:
    """A `tokenizer.json` read by the `tokenizers` library."""

    def __init__(self, path: str):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise SeqError("reading a tokenizer.json needs the `tokenizers` package",
                           hint='pip install "seqdsl[data]"') from None
        if not Path(path).is_file():
            raise SeqFileError(f"tokenizer file not found: {path}")
        try:
            self._tok = Tokenizer.from_file(path)
        except Exception as err:  # tokenizers raises a bare Exception on a malformed file
            raise SeqFileError(f"cannot read tokenizer {path}: {str(err).splitlines()[0]}") from None
        self.name = path
        self.vocab_size = max(self._tok.get_vocab(with_added_tokens=True).values()) + 1  # ids run 0 .. max
        ids = [self._tok.token_to_id(n) for n in EOS_NAMES]
        found = [i for i in ids if i is not None]
        if not found:
            raise SeqError(f"tokenizer {path} has no end-of-document token ({', '.join(EOS_NAMES)})")
        self.eos_id = found[0]

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids


def load_tokenizer(name: str) -> ByteTokenizer | FileTokenizer:
    """`bytes` or the path of a tokenizer.json."""
    return ByteTokenizer() if name == BYTES else FileTokenizer(name)
