"""What the benchmark scripts share: the workspace root and the JDK's tools."""
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def jdk_tool(name):
    """A JDK tool (java, javac, jcmd) from JAVA_HOME, else from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        return os.path.join(home, "bin", name)
    found = shutil.which(name)
    if not found:
        sys.exit(f"{os.path.basename(sys.argv[0])}: no {name}: set JAVA_HOME or put a JDK on PATH")
    return found
