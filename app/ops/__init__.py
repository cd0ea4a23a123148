"""Operations: the CLI, launching vLLM servers, workers, the machine, preparing
models."""
