"""Stage 3 of the pipeline: the plan search (PAPER.md, "Search").

``problem`` (the one-cut interface) <- ``cost`` (bytes moved) <- ``coarsen``; solvers ``dp`` (exact),
``reference`` (brute force, ILP, the exact k-way optimum) and ``baselines``; ``recursive`` (k-way cuts),
``plan`` (the JSON value) and ``algorithms`` (the finders by name).
"""
