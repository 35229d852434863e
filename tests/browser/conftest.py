"""Print the controls the browser test moved, with their redraw times, after the run.

Under pytest-xdist (`make test-browser` runs two notebooks at a time, each worker with its own
JupyterLab and Chromium) every worker writes the changes it made to a JSON file in a folder
the controller names, and the controller prints them all in one table.
"""
import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller, or a run without xdist
        config.browser_results_dir = tempfile.mkdtemp(prefix="course-browser-")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["browser_results_dir"] = node.config.browser_results_dir


def pytest_sessionfinish(session):
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is None:
        return
    import lab_driver

    folder = Path(workerinput["browser_results_dir"])
    (folder / f"{workerinput['workerid']}.json").write_text(
        json.dumps([dataclasses.asdict(answer) for answer in lab_driver.RESULTS]))


def _answers_of_workers(folder: Path) -> list:
    import lab_driver

    answers = []
    for path in sorted(folder.glob("*.json")):
        for item in json.loads(path.read_text()):
            answers.append(lab_driver.Answer(control=lab_driver.Control(**item.pop("control")), **item))
    return sorted(answers, key=lambda answer: answer.control.notebook)  # notebook order, whoever ran it


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    import lab_driver

    folder = Path(config.browser_results_dir)
    answers = lab_driver.RESULTS + _answers_of_workers(folder)
    shutil.rmtree(folder, ignore_errors=True)
    if not answers:
        return
    lines = lab_driver.report_lines(answers)
    terminalreporter.section("controls moved in the browser (fast mode, 1400 px window)")
    for line in lines:
        terminalreporter.write_line(line)
    if path := os.environ.get("COURSE_BROWSER_REPORT"):
        Path(path).write_text("\n".join(lines) + "\n")
