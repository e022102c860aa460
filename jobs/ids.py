"""Job ids: UUID version 7 (RFC 9562), time-ordered so new rows land at the end of the index."""

import os
import time
import uuid


def uuid7() -> uuid.UUID:
    """48 bits of Unix milliseconds, then 74 random bits (with the version and variant bits)."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version 7
    value |= ((rand >> 62) & 0xFFF) << 64  # 12 random bits
    value |= 0b10 << 62  # RFC 4122 variant
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)
