"""``python -m tuner.cli`` runs the ``ddltune`` command."""

from . import console_main

console_main()
