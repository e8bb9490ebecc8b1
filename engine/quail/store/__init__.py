"""The answer store: the model's answers kept by content, found again by a later run that asks the
same (base.py says what every backend keeps)."""

from quail.store.base import Store
from quail.store.keys import answer_key
from quail.store.open import open_store, store_location
from quail.store.values import VECTOR, WRITTEN

__all__ = ["VECTOR", "WRITTEN", "Store", "answer_key", "open_store", "store_location"]
