"""The agent loop: event -> observe -> infer -> parse -> act -> record -> persist -> commit."""
