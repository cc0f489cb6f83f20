import socketserver
from collections.abc import Callable
from typing import Any

from .handler import EPCHandler

class EPCServer(socketserver.TCPServer):
    funcs: dict[str, Callable[..., Any]]
    log_traceback: bool
    def __init__(
        self,
        server_address: tuple[str, int],
        RequestHandlerClass: type[EPCHandler] = ...,
        bind_and_activate: bool = True,
        debugger: Any = None,
        log_traceback: bool = False,
    ) -> None: ...
    def add_client(self, handler: EPCHandler) -> None: ...
    def remove_client(self, handler: EPCHandler) -> None: ...
    def register_function(
        self, function: Callable[..., Any], name: str | None = None
    ) -> Callable[..., Any]: ...
    def get_method(self, name: str) -> Callable[..., Any]: ...

class ThreadingEPCServer(socketserver.ThreadingMixIn, EPCServer):
    def __init__(
        self,
        server_address: tuple[str, int],
        bind_and_activate: bool = True,
        debugger: Any = None,
        log_traceback: bool = False,
    ) -> None: ...
