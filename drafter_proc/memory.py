"""What a KV cache costs the drafter and what its device has free: checked before a Hello's cache is made
(models.kv_memory, which the target shares)."""

from __future__ import annotations

from models.kv_memory import MOCK_SLOT_BYTES, device_of, free_bytes, gib, kv_bytes

__all__ = ["MOCK_SLOT_BYTES", "device_of", "free_bytes", "gib", "kv_bytes"]
