// fleet-tokend's line protocol from Node.js (18 or later), with no packages.
//
// One connection to the agent's Unix socket for the whole process. Requests are pipelined: each
// request() writes its line at once, without waiting for earlier replies, and the replies come in
// the order of the requests. When the agent restarts, the connection closes: the client connects
// again (waiting up to reconnectDeadline ms for the new agent) and sends again the requests not
// answered yet. The protocol: docs/PROTOCOL.md.
//
//   const agent = new FleetTokend();       // $FLEET_TOKEND_SOCKET or /run/fleet-tokend/tokens.sock
//   const { jwt, expiresAt } = await agent.token("vehicle", "v-1");
//   const replies = await Promise.all(["GET vehicle v-1", "GET trip t-7 600", "PING"].map((r) => agent.request(r)));
//
// Run as a script, it reads batches from standard input, one batch a line, its requests separated
// by ";", and prints every reply on a line of its own, in order; a reconnect is logged on stderr:
//
//   echo 'GET vehicle v-1; GET trip t-7 600; PING' | node fleet-tokend-client.mjs [--socket PATH]
//
// Not run by the test suite: checked by hand against a demo agent (README, "From other languages").

import net from "node:net";
import readline from "node:readline";
import { pathToFileURL } from "node:url";

export class TokenError extends Error {
  constructor(code, text) {
    super(`${code}: ${text}`);
    this.code = code; // bad-request, bad-kind, bad-id, denied, unavailable, rejected or busy
    this.text = text;
  }
}

export class FleetTokend {
  constructor(path = process.env.FLEET_TOKEND_SOCKET || "/run/fleet-tokend/tokens.sock", { reconnectDeadline = 2000 } = {}) {
    this.path = path;
    this.reconnectDeadline = reconnectDeadline; // ms to wait for a restarting agent
    this.pending = []; // requests written or to write, not answered yet, in order
    this.socket = null; // the connected socket
    this.connecting = false;
    this.lost = false;
    this.deadline = null;
    this.buffer = "";
  }

  /** `{ jwt, expiresAt }` of a kind and id; rejects with TokenError for an ERR reply. */
  async token(kind, id, minValidity) {
    return parseToken(await this.request(`GET ${kind} ${id}` + (minValidity === undefined ? "" : ` ${minValidity}`)));
  }

  /** One request's reply line (not METRICS or QUIT, which do not get one). */
  request(line) {
    return new Promise((resolve, reject) => {
      this.pending.push({ line, resolve, reject });
      if (this.socket) this.socket.write(line + "\n");
      else this.#connect();
    });
  }

  close() {
    this.closing = true;
    this.socket?.end();
  }

  #connect() {
    if (this.connecting || this.socket) return;
    this.connecting = true;
    const socket = net.createConnection(this.path);
    socket.setEncoding("utf8");
    socket.on("connect", () => {
      this.connecting = false;
      this.socket = socket;
      this.deadline = null;
      if (this.lost) {
        this.lost = false;
        console.error(`fleet-tokend-client: reconnected to ${this.path}; sending ${this.pending.length} unanswered requests again`);
      }
      // Pipelined: every request not answered yet, in one write.
      socket.write(this.pending.map((request) => request.line + "\n").join(""));
    });
    socket.on("data", (chunk) => {
      this.buffer += chunk;
      let newline;
      while ((newline = this.buffer.indexOf("\n")) >= 0) {
        const reply = this.buffer.slice(0, newline);
        this.buffer = this.buffer.slice(newline + 1);
        this.pending.shift()?.resolve(reply);
      }
    });
    socket.on("error", () => {}); // "close" follows, and decides
    socket.on("close", () => {
      // The agent closed the connection (it stopped or restarted), or is not there yet: what is
      // pending has no reply, and is sent again on a new connection.
      if (this.socket === socket) this.socket = null;
      this.connecting = false;
      this.buffer = "";
      if (this.closing || this.pending.length === 0) return;
      this.lost = true;
      this.deadline ??= Date.now() + this.reconnectDeadline;
      if (Date.now() >= this.deadline) {
        const error = new Error(`fleet-tokend unreachable at ${this.path}`);
        for (const request of this.pending.splice(0)) request.reject(error);
        this.deadline = null;
        return;
      }
      setTimeout(() => this.#connect(), 50);
    });
  }
}

export function parseToken(reply) {
  const fields = reply.split(" ");
  if (fields[0] === "OK" && fields.length === 3) return { jwt: fields[1], expiresAt: Number(fields[2]) };
  if (fields[0] === "ERR" && fields.length >= 2) throw new TokenError(fields[1], fields.slice(2).join(" "));
  throw new Error(`not a token reply: ${reply.slice(0, 60)}`);
}

async function main() {
  const at = process.argv.indexOf("--socket");
  const agent = new FleetTokend(at > 0 ? process.argv[at + 1] : undefined);
  try {
    for await (const line of readline.createInterface({ input: process.stdin })) {
      const batch = line.split(";").map((request) => request.trim()).filter((request) => request);
      for (const reply of await Promise.all(batch.map((request) => agent.request(request)))) console.log(reply);
    }
  } catch (error) {
    console.error(`fleet-tokend-client: ${error.message}`);
    process.exitCode = 69;
  } finally {
    agent.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]).href) await main();
