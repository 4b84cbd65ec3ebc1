"""``python -m tuner.cli`` runs the ``ddltune`` command."""

import sys

from . import main

sys.exit(main())
