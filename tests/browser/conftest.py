"""Print the controls the browser test moved, with their redraw times, after the run."""
import os
from pathlib import Path


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    import lab_driver

    if not lab_driver.RESULTS:
        return
    lines = lab_driver.report_lines(lab_driver.RESULTS)
    terminalreporter.section("controls moved in the browser (fast mode, 1400 px window)")
    for line in lines:
        terminalreporter.write_line(line)
    if path := os.environ.get("COURSE_BROWSER_REPORT"):
        Path(path).write_text("\n".join(lines) + "\n")
