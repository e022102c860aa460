"""The records the retry decision takes and returns, under their former home.

The database layer is `jobs.db`; `jobs.outcome` still imports these from here.
"""

from .db import Claimed, Finish

__all__ = ["Claimed", "Finish"]
