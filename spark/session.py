"""One way to make a SparkSession for Stamp's jobs and tests (DESIGN §7).

Contract: `spark_session(master)` returns a session on `master` (default `local[*]`) that
talks only over loopback (SPARK_LOCAL_IP / driver host 127.0.0.1), with the UI off and
few shuffle partitions (our jobs spread a list of items, they do not shuffle data). The
caller stops it (`session.stop()`), or uses `with spark_session(...) as session:`.

Why here and not in each job: the settings that keep Spark on loopback and light (no UI,
small shuffles, Python workers reused) must be the same for the maintenance jobs, the data
source's tests and the demo, and a cold start costs about 6 s, so tests share one session.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

from common.errors import InvalidArgument

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"
JAVA_VERSION_MIN = 17


def java_major_version(java: str | None = None) -> int | None:
    """The major version of `java` (default: $JAVA_HOME/bin/java, else `java` on PATH), or
    None when there is none."""
    java = java or _java_binary()
    if java is None:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stderr + out.stdout).splitlines():
        if "version" in line and '"' in line:
            version = line.split('"')[1]
            head = version.split(".")[0]
            if head == "1":  # 1.8.0_x style
                head = version.split(".")[1]
            return int(head) if head.isdigit() else None
    return None


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    return shutil.which("java")


def spark_session(master: str = DEFAULT_MASTER, app_name: str = "stamp") -> SparkSession:
    """A SparkSession on `master`, on loopback, UI off. Raises InvalidArgument (one line)
    when no Java 17+ is found, instead of Spark's long gateway error."""
    version = java_major_version()
    if version is None or version < JAVA_VERSION_MIN:
        found = "none" if version is None else f"Java {version}"
        raise InvalidArgument(
            f"Spark needs Java {JAVA_VERSION_MIN}+ (found {found}): run 'make setup', "
            "which installs a JRE when it is missing, or set JAVA_HOME")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Spark's Python workers (UDFs, Python data sources) run this interpreter, which has
    # Stamp and its dependencies; Spark's default is whatever `python3` is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master(master).appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.python.worker.reuse", "true")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate())
