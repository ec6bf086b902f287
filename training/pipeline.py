"""`python -m training.pipeline ...`, the command the README and Makefile show: training/report/pipeline.py."""

import sys

from training.report.pipeline import main

if __name__ == "__main__":
    sys.exit(main())
