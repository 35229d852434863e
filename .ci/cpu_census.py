#!/usr/bin/env python3
"""Who used the CPUs during a CI run: this run's own processes, or others on the machine.

A CI phase that takes longer than the same tree did before is either more work or a machine
that gave the run less of its cores (other programs, a neighbour's steal). This census tells
them apart. Every `--every` seconds it reads /proc: each process's CPU time (utime + stime),
its parent, and the machine's steal time. A process belongs to the run when the run's root
process (`--root`) is among its ancestors the first time it is seen; orphans that the run left
keep that mark. Every 15 s it also times a fixed loop in CPU time (`core_speed`): how fast a
core runs code that stays in its caches (its clock, a neighbour on the same core). When the root
exits (or on SIGTERM) it prints, and appends to `--log`:

    busy CPU s of the machine, of which the run's processes, other processes, and the rest
    (processes too short-lived to be sampled), steal, the core speed, and the other processes
    that used most.

Standard library only: it runs under the system python3 before the environment exists.
    python3 .ci/cpu_census.py --root $$ --log ~/.cache/rl-for-llms/ci-runs.log &
"""
import argparse
import os
import statistics
import signal
import sys
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def machine_ticks():
    """(busy, steal) clock ticks of all cores since boot, from /proc/stat's first line."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal, steal


def core_speed(work: int = 200_000) -> float:
    """Millions of steps of a fixed pure-Python loop per CPU second of this thread.

    CPU time, not wall time: waiting for a core (both busy with the run) does not count, so this
    reads how fast a core runs while the run uses it. The loop stays in the core's caches: a
    steady speed with more CPU seconds for the same tests points at what it does not exercise
    (memory bandwidth, the shared cache), a lower speed at the core itself."""
    started = time.thread_time()
    total = 0
    for step in range(work):
        total += step % 7
    spent = time.thread_time() - started
    return work / max(spent, 1e-6) / 1e6


def read_processes():
    """{(pid, start time): (parent pid, CPU ticks, command, state)} of every process in /proc now;
    state "Z" is a zombie (ended, not yet waited for by its parent)."""
    processes = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as stat:
                text = stat.read()
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # it exited between listdir and open
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        rest = text[text.rfind(")") + 2:].split()
        state, parent, start = rest[0], int(rest[1]), int(rest[19])
        user_ticks, system_ticks = int(rest[11]), int(rest[12])
        command = " ".join((command or text[text.find("(") + 1:text.rfind(")")]).split())  # one line
        processes[(int(name), start)] = (parent, user_ticks + system_ticks, command[:150], state)
    return processes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=int, required=True, help="pid of the run's top process")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between samples")
    parser.add_argument("--log", help="file to append the summary to (its folder is made)")
    parser.add_argument("--title", default="CI run", help="first line of the summary")
    args = parser.parse_args()

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    started = time.time()
    busy_start, steal_start = machine_ticks()
    before = read_processes()  # CPU already spent before the census started is not counted
    ours, used, commands = set(), {}, {}
    speeds, next_speed = [], time.time()
    while not stopping:
        now = read_processes()
        if not any(pid == args.root and state != "Z" for (pid, _), (_, _, _, state) in now.items()):
            break  # the run has ended
        if time.time() >= next_speed:  # about 20 ms of one core every 15 s
            speeds.append(core_speed())
            next_speed = time.time() + 15
        parent_of = {pid: parent for (pid, _), (parent, *_) in now.items()}
        for key, (parent, ticks, command, _) in now.items():
            if key not in commands:  # first seen: the run's when its root is an ancestor
                ancestor, hops = key[0], 0
                while ancestor > 1 and ancestor != args.root and hops < 64:
                    ancestor, hops = parent_of.get(ancestor, 0), hops + 1
                if ancestor == args.root:
                    ours.add(key)
                commands[key] = command
            used[key] = ticks - (before[key][1] if key in before else 0)
        time.sleep(args.every)

    busy_end, steal_end = machine_ticks()
    busy = (busy_end - busy_start) / CLOCK_TICKS
    steal = (steal_end - steal_start) / CLOCK_TICKS
    run = sum(ticks for key, ticks in used.items() if key in ours) / CLOCK_TICKS
    others = {}
    for key, ticks in used.items():
        if key not in ours and ticks > 0:
            command = commands[key][:90] or "?"
            others[command] = others.get(command, 0) + ticks / CLOCK_TICKS
    other = sum(others.values())
    wall = time.time() - started
    began = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
    lines = [f"== {args.title}: from {began}, {wall:.0f} s wall, {os.cpu_count()} cores",
             f"busy {busy:.0f} CPU s: this run's processes {run:.0f}, other processes {other:.0f}, "
             f"not sampled (short-lived) {max(busy - run - other - steal, 0):.0f}, steal {steal:.0f}"]
    if speeds:
        lines.append(f"core speed (fixed Python loop, M steps per CPU s; higher is faster): median "
                     f"{statistics.median(speeds):.1f}, range {min(speeds):.1f}-{max(speeds):.1f} "
                     f"over {len(speeds)} samples")
    for command, seconds in sorted(others.items(), key=lambda item: -item[1])[:8]:
        if seconds >= 1:
            lines.append(f"  other: {seconds:7.0f} CPU s  {command}")
    summary = "\n".join(lines) + "\n"
    sys.stdout.write("\n" + summary)
    if args.log:
        try:
            os.makedirs(os.path.dirname(os.path.abspath(args.log)), exist_ok=True)
            with open(args.log, "a") as log:
                log.write(summary)
        except OSError as error:
            print(f"cpu_census: could not append to {args.log}: {error}", file=sys.stderr)


if __name__ == "__main__":
    main()
