"""Transport between the server and the Emacs that started it (EPC)."""
