"""`python -m training.report RUN_DIR`: the run's summary (training/report/report.py)."""

import sys

from training.report.report import main

sys.exit(main())
