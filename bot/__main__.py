"""``python -m bot`` is ``gpubot``."""

import sys

from bot.entry import main

sys.exit(main())
