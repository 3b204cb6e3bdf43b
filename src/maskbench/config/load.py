"""params.yaml as a stage reads it: the file, the active profile merged over it, and where a
key was set (for messages that name it).

Every stage and the Snakefile read parameters through `load_params` / `read_params`, so a wrong
key, type or value fails the same way everywhere (`maskbench.config.checks`).
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import yaml

from maskbench import paths


class ParamsError(ValueError):
    """params.yaml is invalid; the message names every offending key."""


def deep_merge(base: dict, override: dict) -> dict:
    """`override` wins; nested dicts merge key by key, everything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# libyaml's safe loader when PyYAML was built with it: the same documents and errors (file, line,
# column), read four times faster, which every stage pays on params.yaml's 1,100 lines.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> dict:
    try:
        with open(path) as fh:  # a file, not its text: YAML errors then name it, with line and column
            data = yaml.load(fh, Loader=SAFE_LOADER)
    except FileNotFoundError:
        raise ParamsError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def schema_path() -> Path:
    """The schema of the code that reads the parameters, wherever the params file is: in the
    checkout this package is imported from (src/maskbench/config/ is three levels below its
    root), else, for a copy of the package installed elsewhere, in the workflow of the working
    directory."""
    places = [Path(__file__).resolve().parents[3] / paths.SCHEMA, Path.cwd() / paths.SCHEMA]
    found = next((path for path in places if path.is_file()), None)
    if found is None:
        raise ParamsError(f"the params schema is not at {places[0]} (beside the maskbench package) nor at {places[1]} "
                          "(the working directory): install maskbench from its checkout (pip install -e .), or run "
                          "from the checkout's root")
    return found


def resolve_profile(raw: dict, profile: str) -> dict:
    """params.yaml as written with `profiles.<profile>` deep-merged over it."""
    merged = deep_merge({k: v for k, v in raw.items() if k != "profiles"}, raw["profiles"][profile])
    merged["profile"] = profile
    return merged


def params_hash(config: dict) -> str:
    """A short, order-independent fingerprint of the resolved parameters for reports."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def has_key(tree: dict, key: str) -> bool:
    """Whether the dotted `key` is set in `tree` (params as resolved, as written, or a profile)."""
    node = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def lookup(config: dict, key: str):
    """The value at a dotted params.yaml key (`tasks.mnli`)."""
    node = config
    for part in key.split("."):
        node = node[part]
    return node


def _dotted(values: dict, prefix: str = "") -> dict:
    """`{"a": {"b": 1}}` as `{"a.b": 1}`."""
    flat = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        flat |= _dotted(value, f"{name}.") if isinstance(value, dict) and value else {name: value}
    return flat


def _where(raw: dict, key: str, given) -> str:
    """Where in params.yaml `key` is set for the active profile, or which keys there are instead."""
    profile = raw.get("profile")
    for place in (f"profiles.{profile}.{key}", key):  # the active profile's value wins over the base one
        try:
            now = repr(lookup(raw, place))
        except (KeyError, TypeError):
            continue
        now = now if len(now) <= 60 else now[:57] + "..."
        return f"set `{place}` in params.yaml (now {now}), or for one experiment `dvc exp run -S {place}={given}`"
    node, known = raw, []
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            break
        node, known = node[part], [*known, part]
    at = ".".join(known) or "the top level"
    keys = ", ".join(map(str, node)) if isinstance(node, dict) else "none: it is a value"
    return f"params.yaml has no key `{key}`; keys at {at}: {keys}"


def snakemake_config_error(given: dict, raw: dict) -> str:
    """The error for values given to `snakemake --config` or `--configfile`: every stage is a
    `maskbench` command that reads params.yaml itself (and DVC hashes params.yaml), so a value
    given to Snakemake alone would reach no job. Names each key given and where it is set."""
    lines = [f"{key}={value}: {_where(raw, key, value)}" for key, value in _dotted(given).items()]
    return ("snakemake --config/--configfile values are not read: the maskbench stages read params.yaml "
            "(and so does DVC), so edit it there:\n  " + "\n  ".join(lines))


class ReadLog(dict):
    """The parameters with an access log: every value read through it (by `[]`, `get`, `items`,
    `values`, iteration or `**`) adds its dotted key to `read`, one set shared by the whole tree.

    What a stage reads of params.yaml is declared in the stage table (`maskbench.stages`), and
    both tools re-run a job when a key it declares changes; a stage run on a `ReadLog` shows
    what its code reads, so a test can fail when the two differ. A key asked for but unset
    (`get` with a default) counts as read: setting it would change what the job does."""

    def __init__(self, values: dict, read: set[str] | None = None, prefix: str = ""):
        self.read = set() if read is None else read
        self._prefix = prefix
        super().__init__({key: ReadLog(value, self.read, f"{prefix}{key}.") if isinstance(value, dict) else value
                          for key, value in values.items()})

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if not isinstance(value, ReadLog) or not value:  # a section is read where its values are
            self.read.add(f"{self._prefix}{key}")
        return value

    def get(self, key, default=None):
        if key not in self:
            self.read.add(f"{self._prefix}{key}")
            return default
        return self[key]

    def __iter__(self):  # also makes `{**log}` and `dict(log)` read each value through __getitem__
        return iter(list(super().keys()))

    def items(self):
        return [(key, self[key]) for key in self]

    def values(self):
        return [self[key] for key in self]
