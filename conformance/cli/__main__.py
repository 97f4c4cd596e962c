"""`python -m conformance.cli` is `qlk`."""

import sys

from conformance.cli import main

sys.exit(main())
