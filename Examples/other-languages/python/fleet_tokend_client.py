#!/usr/bin/env python3
"""fleet-tokend's line protocol from Python, with the standard library only.

One connection to the agent's Unix socket for the whole process. Requests are pipelined: a
batch is written at once and its replies are read afterwards; they come in the order of the
requests. When the agent restarts, the connection closes: the client connects again (waiting up
to `reconnect_deadline` seconds for the new agent) and sends again the requests not answered
yet. The protocol: docs/PROTOCOL.md.

    agent = FleetTokend()                    # $FLEET_TOKEND_SOCKET or /run/fleet-tokend/tokens.sock
    jwt, expires_at = agent.token("vehicle", "v-1")
    replies = agent.send(["GET vehicle v-1", "GET trip t-7 600", "PING"])

Run as a script, it reads batches from standard input, one batch a line, its requests separated
by ";", and prints every reply on a line of its own, in order; a reconnect is logged on standard
error:

    echo 'GET vehicle v-1; GET trip t-7 600; PING' | python3 fleet_tokend_client.py [--socket PATH]

The test suite runs it against a real agent, across a restart of the agent
(Tests/IntegrationTests/OtherLanguagesTests.swift).
"""

import argparse
import logging
import os
import socket
import sys
import time

DEFAULT_SOCKET = "/run/fleet-tokend/tokens.sock"
# At most this many requests unanswered on the connection: the agent stops reading a connection
# that owes 128 replies, or more than 64 KiB of them, until the client reads (PROTOCOL.md).
WINDOW = 64

log = logging.getLogger("fleet_tokend")


class AgentUnreachable(Exception):
    """No agent answered on the socket within the reconnect deadline."""


class TokenError(Exception):
    """An `ERR <code> <text>` reply; `code` is bad-request, bad-kind, bad-id, denied,
    unavailable, rejected or busy."""

    def __init__(self, code, text):
        super().__init__(f"{code}: {text}")
        self.code = code
        self.text = text


class FleetTokend:
    """A persistent, pipelined connection to the agent. Not for several threads at once: give
    each thread its own, or hold a lock around calls."""

    def __init__(self, path=None, reconnect_deadline=2.0, timeout=15.0):
        self.path = path or os.environ.get("FLEET_TOKEND_SOCKET") or DEFAULT_SOCKET
        self.reconnect_deadline = reconnect_deadline  # s to wait for a restarting agent
        self.timeout = timeout  # s to wait for a reply (a GET may wait for a fetch)
        self.reconnects = 0
        self._socket = None
        self._buffer = b""
        self._lost = False

    def token(self, kind, id, min_validity=None):
        """`(jwt, expires_at)` of a kind and id, e.g. `token("vehicle", "v-1")`; raises
        TokenError for an ERR reply."""
        request = f"GET {kind} {id}" + ("" if min_validity is None else f" {int(min_validity)}")
        return parse_token(self.send([request])[0])

    def send(self, requests):
        """Sends every request (one line each; not METRICS or QUIT, which do not get one reply
        line) and returns their replies, in order."""
        replies = []
        for start in range(0, len(requests), WINDOW):
            replies += self._pipeline(requests[start : start + WINDOW])
        return replies

    def close(self):
        if self._socket is not None:
            self._socket.close()
        self._socket = None
        self._buffer = b""

    def _pipeline(self, requests):
        replies = []
        deadline = None
        while len(replies) < len(requests):
            unanswered = requests[len(replies):]
            try:
                connection = self._connect()
                if self._lost:
                    self._lost = False
                    self.reconnects += 1
                    log.warning("reconnected to %s; sending %d unanswered requests again", self.path, len(unanswered))
                # Pipelined: every request written before any reply is read.
                connection.sendall("".join(line + "\n" for line in unanswered).encode())
                while len(replies) < len(requests):
                    replies.append(self._read_line())
            except (ConnectionError, FileNotFoundError) as error:
                # The agent closed the connection (it stopped or restarted) or is not there yet:
                # keep the replies that came, and send the rest again on a new connection.
                self.close()
                self._lost = True
                deadline = deadline or time.monotonic() + self.reconnect_deadline
                if time.monotonic() >= deadline:
                    raise AgentUnreachable(f"fleet-tokend unreachable at {self.path}: {error}") from error
                time.sleep(0.05)
            except TimeoutError:
                self.close()  # replies still owed on it would answer the next call's requests
                raise
        return replies

    def _connect(self):
        if self._socket is None:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(self.timeout)
            try:
                connection.connect(self.path)
            except OSError:
                connection.close()
                raise
            self._socket = connection
        return self._socket

    def _read_line(self):
        while b"\n" not in self._buffer:
            chunk = self._socket.recv(65536)
            if not chunk:
                raise ConnectionResetError("the agent closed the connection")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


def parse_token(reply):
    """`(jwt, expires_at)` of an `OK <token> <expires-at>` reply; raises TokenError for ERR."""
    fields = reply.split(" ")
    if fields[0] == "OK" and len(fields) == 3:
        return fields[1], int(fields[2])
    if fields[0] == "ERR" and len(fields) >= 2:
        raise TokenError(fields[1], " ".join(fields[2:]))
    raise ValueError(f"not a token reply: {reply[:60]!r}")


def main():
    parser = argparse.ArgumentParser(description="Send batches of fleet-tokend requests, one batch a line.")
    parser.add_argument("--socket", help="the agent's socket (default $FLEET_TOKEND_SOCKET, else " + DEFAULT_SOCKET + ")")
    parser.add_argument("--reconnect-deadline", type=float, default=2.0, help="s to wait for a restarting agent")
    arguments = parser.parse_args()
    logging.basicConfig(format="fleet_tokend_client: %(message)s")
    agent = FleetTokend(arguments.socket, reconnect_deadline=arguments.reconnect_deadline)
    try:
        for line in sys.stdin:
            batch = [request.strip() for request in line.split(";") if request.strip()]
            for reply in agent.send(batch):
                print(reply, flush=True)
    except (AgentUnreachable, TimeoutError) as error:
        print(f"fleet_tokend_client: {error}", file=sys.stderr)
        return 69
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
