"""The parameters: every block parsed strictly (a misspelt key is an error with a
suggestion, a value out of range names its file) and the loader that layers
``conf/base``, ``conf/<env>``, ``params.yaml`` and ``--params``. A leaf: the code these
blocks configure imports them, never the reverse."""
