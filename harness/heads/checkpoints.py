"""Finding and reading a head checkpoint: an embedded tiny head, a local directory, or a hub id.

Every head here is stored in its authors' published layout (a ``config.json`` next to one weights
file), so the same loader reads the public checkpoints and the tiny heads this project trains and
ships in ``harness/assets/heads/`` (named ``tiny/<head>``, e.g. ``tiny/medusa``). A hub id is fetched
with :func:`huggingface_hub.hf_hub_download` (the first of the layout's weight file names that the
repository has); tests only ever use local directories.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from harness.errors import ConfigError, HarnessError
from harness.resources import package_dir

HEADS_DIR = package_dir() / "assets" / "heads"
# the embedded heads: every folder of assets/heads with a config.json, as tiny/<folder>
EMBEDDED_HEADS = tuple(f"tiny/{d.name}" for d in sorted(HEADS_DIR.iterdir()) if (d / "config.json").is_file()) \
    if HEADS_DIR.is_dir() else ()


def resolve_head(ref: str) -> str:
    """``tiny/<name>`` → the embedded head's folder; anything else (a directory or a hub id) as given."""
    if not isinstance(ref, str) or not ref:
        raise ConfigError(f"a head checkpoint is a hub id or a local directory, got {ref!r}")
    if ref.startswith("tiny/"):
        path = HEADS_DIR / ref.split("/", 1)[1]
        if not (path / "config.json").is_file():
            raise ConfigError(f"unknown embedded head '{ref}'. Valid: {', '.join(EMBEDDED_HEADS) or '(none)'}")
        return str(path)
    return ref


def checkpoint_file(ref: str, names: tuple[str, ...]) -> Path:
    """The first of ``names`` that the checkpoint has: a file in a local directory, or downloaded from the hub."""
    resolved = resolve_head(ref)
    local = Path(resolved).expanduser()
    if local.is_dir():
        for name in names:
            if (local / name).is_file():
                return local / name
        raise HarnessError(f"head checkpoint '{ref}' ({local}) has none of {', '.join(names)}")
    if local.exists() or resolved.startswith(("/", "./", "../", "~")):
        raise ConfigError(f"head checkpoint directory not found: {ref}")
    return _hub_file(resolved, names)


def _hub_file(repo_id: str, names: tuple[str, ...]) -> Path:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import EntryNotFoundError, HFValidationError, LocalEntryNotFoundError

    missing, unreachable = [], []
    for name in names:
        try:
            return Path(hf_hub_download(repo_id, name))
        except LocalEntryNotFoundError:  # offline (or the hub unreachable) and not in the local cache
            unreachable.append(name)
        except EntryNotFoundError:
            missing.append(name)
        except HFValidationError as e:
            raise ConfigError(f"'{repo_id}' is no local directory and no valid hub id: {e}") from e
        except OSError as e:  # unknown repository, no access, network errors
            raise HarnessError(f"could not fetch '{name}' of head checkpoint '{repo_id}': {e}") from e
    if unreachable:
        raise HarnessError(f"head checkpoint '{repo_id}': {', '.join(unreachable)} not in the local hub cache and "
                           "the hub cannot be reached (offline?)")
    raise HarnessError(f"hub repository '{repo_id}' has none of {', '.join(missing)}")


def read_config(ref: str) -> dict:
    """The checkpoint's ``config.json`` as a dict."""
    path = checkpoint_file(ref, ("config.json",))
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise HarnessError(f"head checkpoint '{ref}': unreadable config.json ({path}): {e}") from e


def read_weights(ref: str, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The state dict in the first of ``names`` present: ``*.safetensors`` or a torch pickle (read with
    ``weights_only=True``: tensors only, no code)."""
    path = checkpoint_file(ref, names)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise HarnessError(f"head checkpoint '{ref}': {path.name} holds a {type(state).__name__}, not a state dict")
    return state


def write_checkpoint(directory: str | Path, config: dict, module: torch.nn.Module, weights_name: str,
                     dtype: torch.dtype = torch.float16) -> Path:
    """Save ``module``'s weights (in ``dtype``; shared tensors once) and ``config`` in the published layout."""
    from safetensors.torch import save_model

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    original = next(module.parameters()).dtype
    save_model(module.to(dtype), str(out / weights_name))
    module.to(original)
    return out


def check_keys(ref: str, state: dict, allowed: set[str], required: set[str] | None = None,
               ignored: tuple[str, ...] = ()) -> None:
    """Refuse a state dict that has weights the head does not know (keys outside ``allowed``, except
    ``ignored`` prefixes) or lacks ``required`` ones."""
    keys = {k for k in state if not k.startswith(ignored)}
    missing, unknown = sorted((required or set()) - keys), sorted(keys - allowed)
    if missing or unknown:
        raise HarnessError(f"head checkpoint '{ref}' does not match the expected layout: "
                           f"missing {missing[:6]}{' ...' if len(missing) > 6 else ''}, "
                           f"unexpected {unknown[:6]}{' ...' if len(unknown) > 6 else ''}")
