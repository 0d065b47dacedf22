import sys

from executor.cli import main

sys.exit(main())
