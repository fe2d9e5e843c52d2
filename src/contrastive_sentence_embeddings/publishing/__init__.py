"""A trained encoder made public: its model card (from the run's records and scores) and
pushing the folder to the Hugging Face Hub. Imports encoders, data and evaluation."""
