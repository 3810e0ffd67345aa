"""Pass 3: translate a resolved script into one C source for every ABI."""

from .emit import PSTAT_SLOTS, Program, translate

__all__ = ["PSTAT_SLOTS", "Program", "translate"]
