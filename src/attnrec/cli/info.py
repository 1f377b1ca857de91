"""``attnrec data / models``: what a dataset holds and which models (with which settings) exist."""

from typing import Annotated

import typer
from rich.table import Table

from attnrec.cli._common import DataOpt, DataOptions, cli_errors, option_groups, out
from attnrec.cli._output import JsonOpt, print_json
from attnrec.cli.main import app
from attnrec.config import config_to_dict
from attnrec.data.describe import describe, format_description
from attnrec.models.registry import get_spec, list_models
from attnrec.training.train_config import TrainConfig


# -- data ------------------------------------------------------------------------------------------
@app.command(name="data", epilog="Example: attnrec data --data demo")
@cli_errors
@option_groups
def data_cmd(
    data: DataOpt,
    as_json: JsonOpt = False,
    reading: DataOptions = DataOptions(),
) -> None:
    """Describe a dataset: users, items, interactions, sequence lengths, sha256."""
    interactions = reading.load(data)
    desc = describe(interactions)
    if as_json:
        print_json(desc)
    else:
        out.print(format_description(desc), soft_wrap=True, markup=False, highlight=False)


# -- models ----------------------------------------------------------------------------------------
@app.command(epilog="Example: attnrec models sasrec")
@cli_errors
def models(
    name: Annotated[str | None, typer.Argument(help="Show one model's settings and presets.")] = None,
) -> None:
    """List the registered models and their presets, or one model's settings."""
    if name is None:
        table = Table(title="registered models", title_justify="left")
        for col in ("model", "kind", "task", "presets", "description"):
            table.add_column(col)
        for m in list_models():
            spec = get_spec(m)
            table.add_row(m, spec.kind, spec.task, ", ".join(spec.presets) or "-", spec.description)
        out.print(table)
        return
    spec = get_spec(name)
    out.print(f"[bold]{spec.name}[/bold]: {spec.description}", soft_wrap=True)
    table = Table(title="settings (--set model.KEY=VALUE / --set train.KEY=VALUE)", title_justify="left")
    table.add_column("key", no_wrap=True, min_width=len("model.") + 12)  # a key must stay copyable
    table.add_column("default", justify="right", overflow="fold")
    for preset in spec.presets:
        table.add_column(f"preset {preset}", justify="right", overflow="fold")
    for section, cls in (("model", spec.config_cls), ("train", TrainConfig)):
        defaults = config_to_dict(cls())
        for key, value in defaults.items():
            cells = [str(spec.presets[p].get(section, {}).get(key, "")) for p in spec.presets]
            table.add_row(f"{section}.{key}", str(value), *cells)
    out.print(table)
    for preset in spec.presets:  # what each preset claims, and the committed run behind the claim
        out.print(f"[bold]preset {preset}[/bold]: {spec.promise(preset)}", soft_wrap=True)
