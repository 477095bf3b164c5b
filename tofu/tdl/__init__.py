"""TDL, the tensor description language (beside the pipeline): expressions (``expr``), registered
descriptions instantiated for shapes (``describe``), a numpy reference interpreter (``interpret``), and
``lang``, the one import of a description file (``from tofu.tdl.lang import *``)."""
