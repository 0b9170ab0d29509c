"""``python -m bot`` is ``gpubot``."""

import sys

from bot.cli import main

sys.exit(main())
