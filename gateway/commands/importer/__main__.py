"""``python -m gateway.commands.importer``: the import command on its own."""

import sys

from gateway.commands.importer.cli import main

sys.exit(main())
