"""The evaluator library: readers and scoring of STS12-16, STS-B and SICK-R (SentEval's
"all" and "wmean" settings, ``sts.py``), the SentEval transfer tasks (``transfer.py``),
alignment and uniformity (``alignment.py``), the evaluator that encodes each model
once for all of them (``evaluator.py``) and the leaderboard (``leaderboard.py``)."""
