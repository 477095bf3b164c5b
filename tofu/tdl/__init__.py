"""TDL, the tensor description language (beside the pipeline): expressions (``expr``), registered
descriptions instantiated for shapes (``describe``) and a numpy reference interpreter (``interpret``)."""
