"""History stores: the events that arrive between two trainings of a model, per user.

:class:`HistoryStore` is the contract (:mod:`attnrec.store.contract`); :class:`SqliteStore` (one
file, the default) and :class:`RedisStore` (a shared server) implement it; :func:`open_store` opens
one by name. A :class:`~attnrec.recommend.Recommender` given a store
(:meth:`~attnrec.recommend.Recommender.use_store`) answers every known user from the history it was
trained with plus the events stored since.

The package sits beside training and evaluation in the layers (it reads only :mod:`attnrec.data`):
the recommender reads it, serving and the command line write it, and training and evaluation
never see it.
"""

from attnrec.store.contract import (
    DEFAULT_RETENTION,
    EXPORT_COLUMNS,
    HistoryStore,
    StoreUnavailable,
    open_store,
)
from attnrec.store.event_records import Event, Recent, log_events
from attnrec.store.redis_store import RedisStore  # redis-py is imported when a RedisStore is opened
from attnrec.store.sqlite_store import SqliteStore

__all__ = [
    "DEFAULT_RETENTION",
    "EXPORT_COLUMNS",
    "Event",
    "HistoryStore",
    "Recent",
    "RedisStore",
    "SqliteStore",
    "StoreUnavailable",
    "log_events",
    "open_store",
]
