"""New job ids: time-ordered UUIDs (version 7, RFC 9562).

A random (version 4) key lands each insert on a random page of the primary key's index; after
every checkpoint the first change to a page writes the whole page to the write-ahead log, so
nearly every enqueue logs a full 8 kB page. Version 7 ids start with the time in milliseconds:
new keys go to the index's right edge, a few pages that stay in cache, and an enqueue logs
about a fifth as much. The remaining 74 bits are random, so ids stay unguessable.
"""

import os
import time
import uuid


def new_job_id() -> uuid.UUID:
    """A new job's id: a version 7 UUID."""
    return _uuid7()


def _own_uuid7() -> uuid.UUID:
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10))
    return uuid.UUID(
        int=(ms & 0xFFFF_FFFF_FFFF) << 80
        | 0x7 << 76  # version
        | (rand >> 64 & 0xFFF) << 64  # rand_a
        | 0b10 << 62  # variant
        | rand & 0x3FFF_FFFF_FFFF_FFFF  # rand_b
    )


# Python 3.14's own where there is one (it also orders the ids made within one millisecond).
_uuid7 = getattr(uuid, "uuid7", _own_uuid7)
