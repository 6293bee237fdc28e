"""The deploy pipeline: a model and a target in, compressed variants, measurements and a report out (``deploy``)."""
