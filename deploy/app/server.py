"""A placeholder server for the deployment kit: replace it with yours (any module with
a nimblemcp `Server`; `nimblemcp run app/server.py` finds `server`)."""

import nimblemcp as m

server = m.Server("deployed")


@server.tool
def echo(text: str) -> str:
    """Say it back."""
    return text
