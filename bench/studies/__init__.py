"""Studies and paper-claim scripts: ``python -m edgesmith.bench.studies.NAME``.

Each writes its table, JSON and PNG under ``docs/results/`` (or ``--out``). They are research beside the
product: the toolkit's own code never imports them.
"""
