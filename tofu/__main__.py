"""``python -m tofu`` is the ``tofu`` command."""
import sys

from tofu.cli import command

sys.exit(command())
