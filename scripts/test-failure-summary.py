#!/usr/bin/env python3
"""After a failed `make test`: what failed, at the end of the output, where a CI log's tail shows it.

A crash of the test process prints the crashed thread's frames early and a page of registers
and images after them; a failed expectation is reported far above the summary. This prints,
last: the tests that failed, the tests under way when the process ended (the ones a crash
interrupted) and the crash's message and first frames.
"""
import collections
import re
import sys

# A parameterized test starts under its name, then each case as "case passing …", and ends
# once, "with N test cases". The whole run starts as "Test run".
STARTED = re.compile(r"^◇ Test (?!case passing |run started)(\S.*?) started\.$")
ENDED = re.compile(r"^[✔✘] Test (\S.*?)(?: with \d+ tests? in \d+ suites?| with \d+ test cases?)? (?:passed|failed) after")
FAILED = re.compile(r"^✘ Test ")
CRASHED_THREAD = re.compile(r"^Thread \d+ .*crashed:$")
FRAMES_SHOWN = 25


def summarize(lines):
    under_way = collections.Counter()
    failed, crash = [], []
    in_crashed_thread = False
    for line in lines:
        if match := STARTED.match(line):
            under_way[match.group(1)] += 1
        elif match := ENDED.match(line):
            under_way[match.group(1)] -= 1
        if FAILED.match(line):
            failed.append(line)
        if "Fatal error" in line or "Program crashed" in line:
            crash.append(line)
        if CRASHED_THREAD.match(line):
            in_crashed_thread, frames = True, 0
            crash.append(line)
        elif in_crashed_thread and line.strip():
            crash.append(line)
            frames += 1
            in_crashed_thread = frames < FRAMES_SHOWN
        elif in_crashed_thread and frames > 0:
            in_crashed_thread = False  # the blank line after the frames
    interrupted = sorted(name for name, count in under_way.items() if count > 0)
    return failed, interrupted, crash


def main():
    with open(sys.argv[1], encoding="utf-8", errors="replace") as log:
        failed, interrupted, crash = summarize(log.read().splitlines())
    print("\n==== make test failed: summary ====")
    for title, lines in (("failed", failed), ("under way when the test process ended", interrupted),
                         ("crash", crash)):
        if lines:
            print(f"-- {title}:")
            for line in lines[:60]:
                print(f"   {line[:300]}")
    print(f"(the whole output: {sys.argv[1]})")


if __name__ == "__main__":
    main()
