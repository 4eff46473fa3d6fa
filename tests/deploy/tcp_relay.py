"""A TCP relay in a process of its own: ``python tcp_relay.py LISTEN_HOST LISTEN_PORT TO_HOST TO_PORT``.

The cluster rig runs one so that nodes in their network namespaces reach a service that listens
on the root namespace's loopback only (the SeaweedFS fixture): they connect to the bridge's
address, and each connection is piped, both ways, to the service. It prints ``ready`` once it
listens, and stops on SIGTERM.
"""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def main(listen_host: str, listen_port: int, to_host: str, to_port: int) -> None:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(to_host, to_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    server = await asyncio.start_server(handle, listen_host, listen_port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
