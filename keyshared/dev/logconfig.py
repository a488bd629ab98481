"""Log4j 2 configuration shared by the Kafka and ZooKeeper JVMs: one rolling file per server.

Both servers log through slf4j to Log4j 2 (see pom.xml). Without a configuration Log4j 2 would
print only errors to the console; with this one each server writes INFO and above to
`<runtime>/logs/<server>.log`, rolled at 20 MB and capped at four files so a long-lived dev
cluster cannot fill the disk.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_log4j2_config"]


def write_log4j2_config(path: Path, log_file: Path, quiet_loggers: dict[str, str]) -> Path:
    """Write a Log4j 2 properties file that sends everything to `log_file`.

    :param quiet_loggers: logger name -> level, for chatty loggers that would drown the rest.
    """
    lines = [
        "status = warn",
        f"name = keyshared-{log_file.stem}",
        # Log4j's own shutdown hook would stop logging before the server's hook has logged its
        # shutdown; the JVM's exit flushes the file anyway.
        "shutdownHook = disable",
        "appender.file.type = RollingFile",
        "appender.file.name = file",
        f"appender.file.fileName = {log_file}",
        f"appender.file.filePattern = {log_file}.%i",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = [%d] %p %m (%c)%n",
        "appender.file.policies.type = Policies",
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy",
        "appender.file.policies.size.size = 20MB",
        "appender.file.strategy.type = DefaultRolloverStrategy",
        "appender.file.strategy.max = 3",
        "rootLogger.level = INFO",
        "rootLogger.appenderRef.file.ref = file",
    ]
    for index, (name, level) in enumerate(sorted(quiet_loggers.items())):
        lines += [f"logger.q{index}.name = {name}", f"logger.q{index}.level = {level}"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
