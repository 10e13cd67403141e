"""peak_rss.py FILE COMMAND...: runs COMMAND and writes "maxrss_kib N" to FILE, N being the largest
resident set (KiB) of COMMAND and its descendants (getrusage RUSAGE_CHILDREN: what GNU time's %M
reports for mpirun, the largest rank). Exits with COMMAND's status. For machines without GNU time."""
import resource
import subprocess
import sys

if len(sys.argv) < 3:
    sys.exit("usage: peak_rss.py FILE COMMAND...")
status = subprocess.call(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    f.write(f"maxrss_kib {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
sys.exit(status if status >= 0 else 128 - status)
