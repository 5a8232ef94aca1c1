"""Reports of a run, from its results only: one module per format, each a
``ReportWriter`` (``base``) — ``html``, ``markdown``, ``junit_xml``, ``duplicates_json`` and,
last, ``summary_json`` —, all written by ``write``; the views they share (``view``), the CI
step summary, the run folder's life (``runs``), ``run.json`` (``run_json`` over ``codec``)
and the console (``console``, text made safe by ``text``).

It may import ``judge`` (the check registry's ids), ``sandbox`` (the scratch area a run
folder's life prunes) and ``model``; never ``run``, ``story`` or a face.
"""
