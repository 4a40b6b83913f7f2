"""dlscale-publish: the nightly history and the results folders it names, as a static site.

    dlscale-publish history/<system>.jsonl [--results DIR ...] --out SITE [--summary summary.md]

A pure function of the history's lines and the sessions' results files plus the templates in
``templates/``: :mod:`.nights` reads each cell's nights, :mod:`.sessions` finds each night's results
folder and report, :mod:`.views` judges what the pages show (open regressions, what changed between
nights, accepted levels), :mod:`.svg` draws the plots, :mod:`.build` renders the pages,
:mod:`.digest` writes the morning's ``summary.md`` and :mod:`.publish` is the command. Nothing in it
measures.
"""
