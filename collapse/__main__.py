"""`python -m collapse`: the same command as `collapse`."""

import sys

from .book import main

sys.exit(main())
