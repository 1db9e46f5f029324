// fleet-tokend's line protocol from Java (16 or later: Unix domain sockets), with the JDK only.
//
// One connection to the agent's Unix socket for the whole process. Requests are pipelined: a
// batch is written at once and its replies are read afterwards; they come in the order of the
// requests. When the agent restarts, the connection closes: the client connects again (waiting up
// to reconnectDeadline for the new agent) and sends again the requests not answered yet. The
// protocol: docs/PROTOCOL.md.
//
//   var agent = new FleetTokendClient(null);   // $FLEET_TOKEND_SOCKET or /run/fleet-tokend/tokens.sock
//   FleetTokendClient.Token token = agent.token("vehicle", "v-1");
//   List<String> replies = agent.send(List.of("GET vehicle v-1", "GET trip t-7 600", "PING"));
//
// Run as a program (no build step: `java` runs the source file), it reads batches from standard
// input, one batch a line, its requests separated by ";", and prints every reply on a line of its
// own, in order; a reconnect is logged on standard error:
//
//   echo 'GET vehicle v-1; GET trip t-7 600; PING' | java FleetTokendClient.java [--socket PATH]
//
// Not run by the test suite: checked by hand against a demo agent (README, "From other languages").

import java.io.BufferedReader;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

public final class FleetTokendClient implements AutoCloseable {
    /** The most requests left unanswered on the connection: the agent stops reading a connection
     *  that owes 128 replies, or more than 64 KiB of them, until the client reads. */
    private static final int WINDOW = 64;

    /** A token and its expiry, Unix seconds. */
    public record Token(String jwt, long expiresAt) {}

    /** An {@code ERR <code> <text>} reply; code is bad-request, bad-kind, bad-id, denied,
     *  unavailable, rejected or busy. */
    public static final class TokenException extends Exception {
        private static final long serialVersionUID = 1L;
        public final String code;

        TokenException(String code, String text) {
            super(code + ": " + text);
            this.code = code;
        }
    }

    private final String path;
    private final Duration reconnectDeadline;
    private SocketChannel channel;
    private BufferedReader reader;
    private boolean lost;

    /** An agent at path, else $FLEET_TOKEND_SOCKET, else the packaged socket. */
    public FleetTokendClient(String path) {
        this(path, Duration.ofSeconds(2));
    }

    public FleetTokendClient(String path, Duration reconnectDeadline) {
        String environment = System.getenv("FLEET_TOKEND_SOCKET");
        this.path = path != null ? path
                : environment != null && !environment.isEmpty() ? environment : "/run/fleet-tokend/tokens.sock";
        this.reconnectDeadline = reconnectDeadline;
    }

    public Token token(String kind, String id) throws IOException, TokenException {
        return parseToken(send(List.of("GET " + kind + " " + id)).get(0));
    }

    /** Sends requests (one line each; not METRICS or QUIT, which do not get one reply line) and
     *  returns their replies, in order. One batch at a time: the methods are synchronized. */
    public synchronized List<String> send(List<String> requests) throws IOException {
        List<String> replies = new ArrayList<>();
        for (int start = 0; start < requests.size(); start += WINDOW) {
            replies.addAll(pipeline(requests.subList(start, Math.min(start + WINDOW, requests.size()))));
        }
        return replies;
    }

    private List<String> pipeline(List<String> requests) throws IOException {
        List<String> replies = new ArrayList<>();
        long deadline = 0;
        while (replies.size() < requests.size()) {
            List<String> unanswered = requests.subList(replies.size(), requests.size());
            try {
                connect(unanswered.size());
                // Pipelined: every request written before any reply is read.
                ByteBuffer bytes = StandardCharsets.UTF_8.encode(String.join("\n", unanswered) + "\n");
                while (bytes.hasRemaining()) channel.write(bytes);
                while (replies.size() < requests.size()) {
                    String line = reader.readLine();
                    if (line == null) throw new EOFException("the agent closed the connection");
                    replies.add(line);
                }
            } catch (IOException error) {
                // The agent closed the connection (it stopped or restarted), or is not there yet:
                // keep the replies that came, and send the rest again on a new connection.
                close();
                lost = true;
                if (deadline == 0) deadline = System.nanoTime() + reconnectDeadline.toNanos();
                if (System.nanoTime() - deadline >= 0) throw new IOException("fleet-tokend unreachable at " + path, error);
                try {
                    Thread.sleep(50);
                } catch (InterruptedException interrupted) {
                    Thread.currentThread().interrupt();
                    throw new IOException("interrupted", interrupted);
                }
            }
        }
        return replies;
    }

    private void connect(int unanswered) throws IOException {
        if (channel != null) return;
        SocketChannel opened = SocketChannel.open(StandardProtocolFamily.UNIX);
        try {
            opened.connect(UnixDomainSocketAddress.of(path));
        } catch (IOException error) {
            opened.close();
            throw error;
        }
        channel = opened;
        reader = new BufferedReader(new InputStreamReader(Channels.newInputStream(channel), StandardCharsets.UTF_8));
        if (lost) {
            lost = false;
            System.err.println("fleet-tokend-client: reconnected to " + path + "; sending " + unanswered
                    + " unanswered requests again");
        }
    }

    @Override
    public synchronized void close() {
        try {
            if (channel != null) channel.close();
        } catch (IOException ignored) {
            // closing: nothing to do
        }
        channel = null;
        reader = null;
    }

    public static Token parseToken(String reply) throws TokenException {
        String[] fields = reply.split(" ", -1);
        if (fields[0].equals("OK") && fields.length == 3) return new Token(fields[1], Long.parseLong(fields[2]));
        if (fields[0].equals("ERR") && fields.length >= 2) {
            throw new TokenException(fields[1], reply.substring(Math.min(reply.length(), 5 + fields[1].length())));
        }
        throw new IllegalArgumentException("not a token reply: " + reply.substring(0, Math.min(60, reply.length())));
    }

    public static void main(String[] arguments) throws IOException {
        String socket = arguments.length == 2 && arguments[0].equals("--socket") ? arguments[1] : null;
        try (var agent = new FleetTokendClient(socket);
                var input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            for (String line; (line = input.readLine()) != null;) {
                List<String> batch = new ArrayList<>();
                for (String request : line.split(";")) {
                    if (!request.isBlank()) batch.add(request.strip());
                }
                for (String reply : agent.send(batch)) System.out.println(reply);
            }
        } catch (IOException error) {
            System.err.println("fleet-tokend-client: " + error.getMessage());
            System.exit(69);
        }
    }
}
