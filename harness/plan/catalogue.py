"""The scenario catalogue shipped inside the package (``harness/catalogue``, the checkout's
``scenarios/`` folder): a shipped scenario is named by its name from any folder
(``shopops-chaos run o1001 --sut .``), and a replay command for a student names it so
(``ExecutionPlan.replay_from(..., checkout=True)``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CATALOGUE", "catalogue_name", "resolve"]

#: The catalogue's folder (its ``targets/`` subfolder holds the target scenarios).
CATALOGUE = Path(__file__).resolve().parents[1] / "catalogue"


def _files() -> dict[str, Path]:
    folders = (CATALOGUE, CATALOGUE / "targets")
    return {f.stem: f for folder in folders if folder.is_dir()
            for f in sorted(folder.glob("*.toml"))}


def resolve(arg: str) -> Path:
    """The scenario file or folder ``arg`` names: itself when it exists, else the
    catalogue's scenario of that name (``o1001``), else ``arg`` as given (the caller refuses
    it as a missing path)."""
    path = Path(arg)
    if path.exists() or path.suffix or "/" in arg:
        return path
    return _files().get(arg, path)


def catalogue_name(path: Path | None) -> str | None:
    """The name ``path`` has in the catalogue, or ``None`` when it is not a shipped
    scenario file."""
    if path is None:
        return None
    found = _files().get(path.stem)
    return path.stem if found is not None and found.resolve() == path.resolve() else None
