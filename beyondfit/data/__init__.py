"""Batches for the engine: in-memory tensor batches, users' tables, the bundled data sets."""

from beyondfit.data.batches import TensorBatches, split
from beyondfit.data.tables import load_table

__all__ = ["TensorBatches", "load_table", "split"]
