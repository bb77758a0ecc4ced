"""Adapters for inference engines and RL frameworks: vLLM (a weight-transfer backend), SGLang
(update_weights_from_tensor) and verl (a CheckpointEngine). Each imports its engine lazily."""
