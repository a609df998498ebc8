import sys

from gateway.commands.cli import main

sys.exit(main())
