import sys

from nlptasks.cli import main

sys.exit(main())
