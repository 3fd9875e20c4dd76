"""bench/class_tables.py: the generated classification tables' shapes, labels and seeding."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "class_tables.py"
_SPEC = importlib.util.spec_from_file_location("bench_class_tables", _PATH)
class_tables = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = class_tables
_SPEC.loader.exec_module(class_tables)

# generator, columns (numbers + text), text columns, classes
SHAPES = [
    (class_tables.ordinal_table, 7, 1, 3),
    (class_tables.quadrant_table, 10, 2, 4),
    (class_tables.threshold_table, 11, 1, 3),
    (class_tables.switch_table, 13, 1, 2),
    (class_tables.ring_table, 17, 1, 5),
    (class_tables.city_table, 8, 2, 2),
    (class_tables.skew_table, 11, 1, 6),
]


@pytest.mark.parametrize("make, width, n_text, n_classes", SHAPES,
                         ids=[s[0].__name__ for s in SHAPES])
def test_generated_table_shape_text_labels_and_seed(make, width, n_text, n_classes):
    x, y = make(600, seed=3)
    assert x.shape == (600, width) and x.dtype == object and y.shape == (600,)
    assert all(isinstance(v, float) for v in x[0, : width - n_text])
    assert all(isinstance(v, str) for v in x[0, width - n_text:])
    assert y.dtype.kind == "U" and len(np.unique(y)) == n_classes  # labels are words
    x2, y2 = make(600, seed=3)
    assert (x2 == x).all() and (y2 == y).all()  # the seed fixes the table
    x3, _ = make(600, seed=4)
    assert not (x3 == x).all()
