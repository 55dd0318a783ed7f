import sys

from nlptasks.cli import main

__all__: list[str] = []

sys.exit(main())
