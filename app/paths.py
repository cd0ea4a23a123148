"""Where the app's files are: the checkout, and the models' folder."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("VOICE_AGENT_MODELS", ROOT / "models"))
