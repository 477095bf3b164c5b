"""Stage 5 of the pipeline: running partitioned graphs (``emulate``: one cut, op by op, on CPU contexts)."""
