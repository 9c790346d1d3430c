"""`bench._common.cpu_seconds`: another process's CPU time to well under a millisecond, not in /proc's 10 ms ticks."""

import subprocess
import sys
import time

from bench._common import cpu_seconds

# Burns CPU in small steps, printing after each: the parent reads the child's clock between steps.
_CHILD = """
import sys, time
for line in sys.stdin:
    end = time.thread_time() + float(line) / 1000
    while time.thread_time() < end:
        pass
    print(time.process_time(), flush=True)
"""


def test_another_process_cpu_is_read_to_the_fraction_of_a_millisecond():
    with subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as child:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("0\n")  # started: its interpreter's start-up is not a step's
        child.stdin.flush()
        child.stdout.readline()
        time.sleep(0.005)
        reads = []
        for burn_ms in (3, 0.7, 2.3):
            before = cpu_seconds(child.pid)
            child.stdin.write(f"{burn_ms}\n")
            child.stdin.flush()
            own = float(child.stdout.readline())  # the child's own count, taken at the end of its step
            time.sleep(0.005)  # it is back in its read (asleep): its clock stands still
            reads.append((burn_ms, (cpu_seconds(child.pid) - before) * 1000, own))
        for burn_ms, measured_ms, _ in reads:
            assert burn_ms <= measured_ms < burn_ms + 1.5, reads
        # The same clock the child reads of itself, to the printing and the readline around it.
        assert abs(cpu_seconds(child.pid) - reads[-1][2]) < 0.002
        child.kill()
