"""`keel`: one command for running the service and for using it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from keel_cli.client import checkpoints_app, files_app, jobs_app, models_app
from keel_cli.demo import demo
from keel_cli.listings import trainers_app
from keel_cli.server import api, create_key, keys_app, migrate, serve, up, worker

app = typer.Typer(help="Keel: an offline-RLHF training service.", no_args_is_help=True)
app.command()(up)
app.command()(api)
app.command()(worker)
app.command()(serve)
app.command()(migrate)
app.add_typer(keys_app, name="keys")
app.add_typer(files_app, name="files")
app.add_typer(jobs_app, name="jobs")
app.add_typer(checkpoints_app, name="checkpoints")
app.add_typer(models_app, name="models")
app.add_typer(trainers_app, name="trainers")
app.command()(demo)


@app.command("demo-assets")
def demo_assets(out_dir: Annotated[Path, typer.Argument(help="Directory to write the demo model and data to.")]) -> None:
    """Build the deterministic demo tokenizer, tiny models and datasets."""
    from engine.demo import build_demo_assets

    paths = build_demo_assets(out_dir)
    for name, path in sorted(paths.items()):
        typer.echo(f"{name}: {path}")


__all__ = ["app", "create_key"]

if __name__ == "__main__":
    app()
