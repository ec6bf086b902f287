"""`python -m training.import_reference REF.yaml --out-dir DIR`: see training/import_reference/translate.py."""

import sys

from training.import_reference.translate import main

sys.exit(main())
