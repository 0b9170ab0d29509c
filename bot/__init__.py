"""gpubot: Slack chatops for teams that run large models on their own GPU servers."""

__version__ = "0.1.0"
