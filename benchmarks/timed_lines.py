"""timed_lines.py LOG COMMAND...: runs COMMAND, writes each line of its output (stdout and stderr
together) to LOG prefixed by the seconds since COMMAND started, then the lines
"maxrss_kib N" (the largest resident set of COMMAND and its descendants, KiB: getrusage
RUSAGE_CHILDREN, the largest rank under mpirun) and "exit S". Exits with COMMAND's status."""
import resource
import subprocess
import sys
import time

if len(sys.argv) < 3:
    sys.exit("usage: timed_lines.py LOG COMMAND...")
start = time.monotonic()
with open(sys.argv[1], "w") as log:
    proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    for line in proc.stdout:
        log.write(f"{time.monotonic() - start:.3f} {line}")
        log.flush()
    status = proc.wait()
    log.write(f"maxrss_kib {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\n")
    log.write(f"exit {status}\n")
sys.exit(status if status >= 0 else 128 - status)
