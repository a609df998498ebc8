"""The commands: above the engine, which never imports them.

``cli`` parses the command line and dispatches to one module per command (``serve``,
``catalog``, ``diff``, ``doctor``, ``importer``, ``artifacts``, ``demo``); ``startup``
holds what serve, catalog and doctor share.
"""
