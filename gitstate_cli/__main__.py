"""``python -m gitstate_cli`` runs ``git agentos``."""

from .main import main

main()
