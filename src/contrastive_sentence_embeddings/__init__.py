"""Contrastive Sentence Embeddings
"""

__version__ = "0.1"
