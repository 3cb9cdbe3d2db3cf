"""Toy byte-level tokenizer: UTF-8 bytes are ids 0..255, then BOS and EOS."""

from __future__ import annotations

BOS_ID = 256
EOS_ID = 257


class ByteTokenizer:
    """``encode`` prepends BOS; ``decode`` keeps byte ids only (specials and ids past 255 drop)."""

    bos_token_id = BOS_ID
    eos_token_id = EOS_ID

    def encode(self, text: str) -> list[int]:
        return [BOS_ID, *text.encode("utf-8")]

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")
