"""Paper 3 (class-dependent heterogeneous noise): data model, two-layer CNN, training-free influence score.

The ``noise-cnn`` producer lives in ``models.papers.influence.producer``; the influence score generalised
to any model, used to choose PTQ calibration data, is ``compress.calibration_select``.
"""
