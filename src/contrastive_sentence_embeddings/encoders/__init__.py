"""Sentence encoders: loading a model folder or Hub id, pooling, batched encoding, the
attention kernels, a saved model's fingerprint and integrity checks, and the embedding
cache keyed by them. Imports nothing of the package outside this folder."""
