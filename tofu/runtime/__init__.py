"""Stage 5 of the pipeline: partitioned graphs bound on k devices, trained and measured (``train``, ``run``),
their memory (``memory``), and the values they train with and save (``data``)."""
