"""The training library. ``losses`` (pure functions, each with its formula),
``dropout`` (dropout control without patching transformers), ``heads``, ``methods``
(each method as a loss plus a batch recipe), ``declutr`` (span batches), ``clsr``
(the frozen-encoder model and its cached embeddings), ``trainer`` (the one training
loop), ``distributed`` (gathering embeddings under DDP), ``saving`` (models that
sentence-transformers and AutoModel load) and ``run`` (a method's block to a trained
model, what the training nodes call)."""
