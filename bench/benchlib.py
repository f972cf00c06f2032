"""What every benchmark driver shares: the rules of docs/benchmarks.md in code.

- Spread: every configuration runs at least MIN_REPEATS times and is shown as median with its
  min..max (`spread`).
- Verdicts: each target prints PASS or FAIL on one line; any FAIL (or failed validation) makes
  the driver exit 1 (`Verdicts.exit_status`).
- Machine and load: the processor, cores, memory and kernel, and the load average before and
  after each run (`machine`, `LoadLog`), printed with the results.

Imported by the drivers under bench/ (each puts this folder on sys.path).
"""
import os
import platform
import statistics
import subprocess

MIN_REPEATS = 3


def spread(values, fmt="{:.1f}"):
    """'median (min..max)' of the values, each through fmt."""
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))}..{fmt.format(max(values))})"


def machine():
    """One line: processor model, family/model numbers, cores, memory, kernel, commit."""
    cpu, family, model = "unknown processor", "?", "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k, v = k.strip(), v.strip()
                if k == "model name":
                    cpu = v
                elif k == "cpu family":
                    family = v
                elif k == "model" and model == "?":
                    model = v
    except OSError:
        pass
    mem_gib = 0.0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / 1048576
    except OSError:
        pass
    return (f"{cpu} (family {family} model {model}), {len(os.sched_getaffinity(0))} cores, "
            f"{mem_gib:.0f} GiB, Linux {platform.release()}, commit {commit()}")


def commit():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("+changes" if dirty else "")


def cpu_times():
    """The whole machine's CPU time so far from /proc/stat: (total, steal) in clock ticks; steal
    is what the hypervisor gave to other guests while this one had work to run. None where the
    kernel does not say."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        ticks = [int(x) for x in fields[1:9]]
        return sum(ticks), ticks[7]
    except (OSError, ValueError, IndexError):
        return None


class LoadLog:
    """The 1-minute load average at the start and after each run, and the share of the cores'
    time the hypervisor stole over the whole benchmark (a neighbour's load, which the load
    average does not show)."""

    def __init__(self):
        self.start = os.getloadavg()[0]
        self.after = []
        self.ticks = cpu_times()

    def mark(self):
        self.after.append(os.getloadavg()[0])

    def line(self, busy):
        """busy: the processes the benchmark itself keeps running (its ranks)."""
        worst = max(self.after, default=self.start)
        text = (f"1-minute load average {self.start:.2f} at the start, at most {worst:.2f} after "
                f"a run ({os.cpu_count()} cores; above the benchmark's own {busy} means other "
                f"work shared the cores)")
        now = cpu_times()
        if self.ticks is not None and now is not None and now[0] > self.ticks[0]:
            stolen = (now[1] - self.ticks[1]) / (now[0] - self.ticks[0]) * 100
            text += f"; {stolen:.1f}% of the cores' time stolen by the hypervisor"
        return text


class Verdicts:
    """Targets judged one per line; the driver's exit status follows them."""

    def __init__(self):
        self.lines = []
        self.failed = []

    def judge(self, ok, text):
        verdict = "PASS" if ok else "FAIL"
        self.lines.append(f"  {verdict:<6}{text}")
        if not ok:
            self.failed.append(text)
        return ok

    def fail(self, text):
        return self.judge(False, text)

    def print(self, out):
        for line in self.lines:
            print(line, file=out)

    def exit_status(self, validation_ok=True):
        return 0 if validation_ok and not self.failed else 1
