"""The small helpers every floor of the package uses; they import nothing else of ``course_lib``.

- ``wording.py``: how an error names a fix, for a Python user or on the command line.
- ``jsonl.py``: reading a JSON Lines file, line by line, naming the line that is wrong.
- ``user_tasks.py``: a task given as a ``.jsonl`` file or a ``module:function``.
- ``user_code.py``: resolving ``module.function`` or ``file.py:function`` to a callable.
- ``figures.py``: figures built without pyplot, and their display in a notebook.
- ``splits.py``: a single task file split into train and test by a hash of each prompt.
- ``forks.py``: stopping a copy of a run that ``os.fork()`` in user code made, before it writes.
"""
