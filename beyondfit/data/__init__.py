"""Batches for the engine: in-memory tensor batches, users' tables, the bundled data sets."""

from beyondfit.data.batches import split
from beyondfit.data.tables import load_table

__all__ = ["load_table", "split"]
