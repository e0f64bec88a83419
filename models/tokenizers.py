"""Tokenizers as the processes use them: a chat-templated prompt, text back, end ids and a fingerprint."""

from __future__ import annotations

import hashlib
import json

from models.mock import EOS

# Printable ASCII, the mock tokenizer's alphabet: id 1 + i for character i, id 0 is end of sequence.
_ALPHABET = "".join(chr(c) for c in range(32, 127))


class MockTokenizer:
    """Characters to ids and back over a vocabulary of any size (ids wrap around the alphabet)."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.eos = frozenset({EOS})
        self.fingerprint = hashlib.blake2b(f"mock-ascii:{vocab_size}".encode(), digest_size=8).hexdigest()

    def prompt_ids(self, text: str) -> list[int]:
        return self.chat_ids([text])

    def text_ids(self, text: str) -> list[int]:
        """Raw text's ids, no chat template (the mock has none: the same ids as prompt_ids)."""
        return self.chat_ids([text])

    encode = text_ids  # as a transformers tokenizer's (the vLLM-compatible layer's get_tokenizer gives it)

    def chat_ids(self, turns: list[str]) -> list[int]:
        """The turns joined by new lines (outside the alphabet: id 1), one id per character."""
        text = "\n".join(turns)
        ids = [1 + (_ALPHABET.index(c) if c in _ALPHABET else 0) % (self.vocab_size - 1) for c in text]
        return ids or [1]

    def message_ids(self, messages: list[dict]) -> list[int]:
        """Chat messages ({"role", "content"}, system ones included): their contents as chat_ids joins turns."""
        return self.chat_ids([m["content"] for m in messages])

    def decode(self, ids) -> str:
        return "".join(_ALPHABET[(i - 1) % len(_ALPHABET)] for i in ids if i != EOS)

    def prompt_text(self, ids) -> str:
        """The text of prompt ids (the mock has no special tokens to keep)."""
        return self.decode(ids)


class HFTokenizer:
    """A transformers tokenizer; prompts are one user turn through the chat template, no system turn."""

    def __init__(self, tokenizer, generation_config=None) -> None:
        self.tok = tokenizer
        eos = set()
        for source in (tokenizer.eos_token_id, getattr(generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                eos.add(source)
            elif source:
                eos.update(int(i) for i in source)
        self.eos = frozenset(eos)
        vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
        special = [tokenizer.bos_token_id, sorted(self.eos)]
        digest = hashlib.blake2b(json.dumps([vocab, special]).encode(), digest_size=8)
        self.fingerprint = digest.hexdigest()

    def prompt_ids(self, text: str) -> list[int]:
        return self.chat_ids([text])

    def text_ids(self, text: str) -> list[int]:
        """Raw text's ids, no chat template, with the special tokens the tokenizer adds by default (a BOS
        token where it has one), as vLLM's `generate` reads a text prompt."""
        return list(self.tok(text)["input_ids"])

    def chat_ids(self, turns: list[str]) -> list[int]:
        """Token ids of a conversation whose turns alternate user, assistant, ..., user, ready for the
        assistant's next answer; without a chat template, the turns joined by new lines."""
        return self.message_ids([{"role": "user" if i % 2 == 0 else "assistant", "content": t}
                                 for i, t in enumerate(turns)])

    def message_ids(self, messages: list[dict]) -> list[int]:
        """Token ids of chat messages ({"role", "content"}: system, user, assistant) through the chat template,
        ready for the assistant's next answer; without a template, the contents joined by new lines."""
        if self.tok.chat_template is None:
            return list(self.tok("\n".join(m["content"] for m in messages))["input_ids"])
        # enable_thinking=False selects Qwen3's non-thinking mode; other templates ignore it.
        out = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                           enable_thinking=False)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def prompt_text(self, ids) -> str:
        """The text of prompt ids as the model reads it: chat template and special tokens included."""
        return self.tok.decode(list(ids), skip_special_tokens=False)
