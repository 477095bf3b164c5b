"""``python -m tofu`` is the ``tofu`` command."""
import sys

from tofu.cli import main

sys.exit(main())
