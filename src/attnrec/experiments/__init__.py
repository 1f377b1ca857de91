"""Experiments: one runner that trains and tests a configured model, and the tables of its results.

Everything that measures models goes through :func:`~attnrec.experiments.runner.run_one`:
``attnrec compare`` (:mod:`attnrec.experiments.comparison`), the benchmark config runner
(:mod:`attnrec.experiments.configured`, ``benchmarks/run.py``) and the BERT4Rec studies
(``benchmarks/studies.py``). Their result tables are rendered by :mod:`attnrec.experiments.tables`,
with the published figures put beside ours only where :mod:`attnrec.evaluation.published` says
they are comparable.

This is the user-level layer: it builds on the :class:`~attnrec.Recommender` and is used by the CLI
and the benchmark scripts, never the other way round.
"""
