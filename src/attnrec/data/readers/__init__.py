"""Readers of interaction logs, one module per format family; each is a pure function of a path.

- :mod:`~attnrec.data.readers.lines`: the papers' ``user item`` pairs and user-line files
- :mod:`~attnrec.data.readers.movielens`: MovieLens ``ratings.dat``, ``u.data``, ``ratings.csv``
- :mod:`~attnrec.data.readers.jsonlines`: JSON-lines dumps (Amazon, Steam, OTTO, any key mapping)
- :mod:`~attnrec.data.readers.table`: CSV/TSV/Parquet tables, columns by name or position
- :mod:`~attnrec.data.readers.columns` and :mod:`~attnrec.data.readers.fields`: the column
  roles and field parsing they share
"""
