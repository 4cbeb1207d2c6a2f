"""Every config key from the environment (pydantic-settings), over the TOML file.

`RESURGO_<SECTION>__<KEY>` sets `[section] key`, deeper tables with more `__`:

    RESURGO_TEMPORAL__ADDRESS=temporal.prod:7233
    RESURGO_API__PORT=8000
    RESURGO_CLUSTERS__GPU__PARTITIONS='["a100", "h100"]'      # lists and tables as JSON
    RESURGO_AUDIT__URL_FILE=/run/secrets/audit-url            # a secret read from a file

A variable ending in `_FILE` whose key without the suffix is a config key reads that key's value
from the named file (trailing whitespace stripped): secrets stay out of the environment and of
`ps`. Names are case-insensitive, so cluster and token names set this way are lower case. The
environment wins over the file; the file wins over the defaults.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, create_model
from pydantic_settings import BaseSettings, SettingsConfigDict

from resurgo.config import SecretFileError

__all__ = ["ENV_PREFIX", "SecretFileError", "environment_overrides", "merge", "model_of"]

ENV_PREFIX = "RESURGO_"


class _Environment(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="ignore", case_sensitive=False
    )


def _environment_of(root: type[BaseModel]) -> type[BaseSettings]:
    """One table per section of `root`, so a section added to the config is settable too."""
    sections: dict[str, Any] = {name: (dict[str, Any], {}) for name in root.model_fields}
    return create_model("Environment", __base__=_Environment, **sections)


def model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """(the model a field holds, whether it holds a mapping of them) for `X`, `X | None`,
    `dict[str, X]`."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            model, mapping = model_of(arg)
            if model is not None:
                return model, mapping
        return None, False
    if origin is dict:
        model, _ = model_of(get_args(annotation)[1])
        return model, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _resolve_files(
    model: type[BaseModel] | None, values: dict[str, Any], where: str
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fields = model.model_fields if model is not None else {}
    for key, value in values.items():
        field = fields.get(key)
        if isinstance(value, dict) and field is not None:
            inner, mapping = model_of(field.annotation)
            if mapping:
                out[key] = {
                    name: _resolve_files(inner, item, f"{where}{key}.{name}.")
                    if isinstance(item, dict)
                    else item
                    for name, item in value.items()
                }
            else:
                out[key] = _resolve_files(inner, value, f"{where}{key}.")
        elif key.endswith("_file") and key not in fields and key[: -len("_file")] in fields:
            try:
                out[key[: -len("_file")]] = Path(str(value)).read_text().rstrip()
            except OSError as exc:
                raise SecretFileError(f"{where}{key}: cannot read {value}: {exc.strerror}") from exc
        else:
            out[key] = _json_or_text(value)
    return out


def _json_or_text(value: Any) -> Any:
    """Lists and tables are given as JSON (`'["a", "b"]'`); anything else stays text."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def environment_overrides(root: type[BaseModel]) -> dict[str, Any]:
    """The config keys the environment sets, as nested tables (secrets read from their files)."""
    found = {k: v for k, v in _environment_of(root)().model_dump().items() if v}
    return _resolve_files(root, found, "")


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, table by table."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
