"""The CLI's two consoles: results on stdout, progress and messages on stderr."""
import click
from rich.console import Console

out = Console()
err = Console(stderr=True)


def warn(message: str) -> None:
    """One unwrapped line on stderr (rich would wrap a long path at 80 columns off a terminal)."""
    click.echo(f"warning: {message}", err=True)
