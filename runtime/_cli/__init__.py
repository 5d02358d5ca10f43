"""durably._cli: the ``durably`` command, its demo (``demo``) and the web console (``console``).

The operator surfaces, kept out of the core: ``durably`` never imports
this package (it imports the runtime, the bench and the torture kit). The
command is ``durably._cli.main:main``; ``python -m durably._cli`` runs it too.
"""
