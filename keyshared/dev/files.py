"""Where one server's files live inside a runtime folder: the same layout for both servers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServerFiles"]


@dataclass(frozen=True)
class ServerFiles:
    """A server's config, logging config, data and logs under ``<runtime>/<name>``."""

    home: Path
    config: Path
    log4j_config: Path
    data: Path
    log_file: Path
    console_file: Path

    @classmethod
    def in_runtime(cls, runtime_dir: Path, name: str, config_name: str) -> ServerFiles:
        home = runtime_dir / name
        return cls(
            home=home,
            config=home / config_name,
            log4j_config=home / "log4j2.properties",
            data=home / "data",
            log_file=runtime_dir / "logs" / f"{name}.log",
            console_file=runtime_dir / "logs" / f"{name}.out",
        )

    @property
    def marker(self) -> str:
        """The config path: on the JVM's command line, it identifies this runtime's server."""
        return str(self.config)
