"""python -m volshard.audit --nproc-per-node W [--epochs E] [--reruns R] [--json FILE] [--png FILE] SCRIPT.py [ARGS...]"""

import sys

from .launch import main

sys.exit(main())
