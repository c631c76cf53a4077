"""``python -m gpuyield``."""

from gpuyield.cli import main

main()
