"""`python -m collapse`: the same command as `collapse`."""

import sys

from .cli import main

sys.exit(main())
