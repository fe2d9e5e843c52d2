"""Data preparation library: readers of the raw formats, cleaning, span sampling and
pair extraction. Pure functions; the Kedro nodes in ``pipelines/`` only wire them."""
