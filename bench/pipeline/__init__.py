"""The deploy pipeline: a model and a target in, compressed variants, measurements and a report out (``deploy``), and
the WAV app built on a deployed stream model (``denoise``)."""
