"""`python -m utils.generation_viewer RUN_OR_FILE... -o page.html` (see utils/generation_viewer/__init__.py)."""

import sys

from utils.generation_viewer import main

sys.exit(main())
