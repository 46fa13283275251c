"""The CLI's two consoles: results on stdout, progress and messages on stderr."""
from rich.console import Console

out = Console()
err = Console(stderr=True)
