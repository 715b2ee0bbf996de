"""Stand-in of vLLM (see tests/python/vllm_standin/README): not vLLM."""
