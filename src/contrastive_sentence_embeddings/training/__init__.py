"""Training building blocks: contrastive losses and dropout control."""
