// fleet-tokend's line protocol from Go, with the standard library only.
//
// One connection to the agent's Unix socket for the whole process. Requests are pipelined: a
// batch is written at once and its replies are read afterwards; they come in the order of the
// requests. When the agent restarts, the connection closes: the client connects again (waiting up
// to ReconnectDeadline for the new agent) and sends again the requests not answered yet. The
// protocol: docs/PROTOCOL.md.
//
//	agent := NewAgent("")                    // $FLEET_TOKEND_SOCKET or /run/fleet-tokend/tokens.sock
//	jwt, expiresAt, err := agent.Token("vehicle", "v-1")
//	replies, err := agent.Send([]string{"GET vehicle v-1", "GET trip t-7 600", "PING"})
//
// Run as a program, it reads batches from standard input, one batch a line, its requests separated
// by ";", and prints every reply on a line of its own, in order; a reconnect is logged on stderr:
//
//	echo 'GET vehicle v-1; GET trip t-7 600; PING' | go run . [-socket PATH]
//
// Not run by the test suite, and not compiled by it: Go is not among the tools the suite needs.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// window is the most requests left unanswered on the connection: the agent stops reading a
// connection that owes 128 replies, or more than 64 KiB of them, until the client reads.
const window = 64

// TokenError is an `ERR <code> <text>` reply; Code is bad-request, bad-kind, bad-id, denied,
// unavailable, rejected or busy.
type TokenError struct{ Code, Text string }

func (e *TokenError) Error() string { return e.Code + ": " + e.Text }

// Agent is one persistent, pipelined connection to the agent, safe for several goroutines (one
// batch at a time).
type Agent struct {
	Path              string
	ReconnectDeadline time.Duration // how long to wait for a restarting agent
	Timeout           time.Duration // how long to wait for a batch's replies (a GET may wait for a fetch)

	mu     sync.Mutex
	conn   net.Conn
	reader *bufio.Reader
	lost   bool
}

// NewAgent returns an agent at path, else $FLEET_TOKEND_SOCKET, else the packaged socket.
func NewAgent(path string) *Agent {
	if path == "" {
		path = os.Getenv("FLEET_TOKEND_SOCKET")
	}
	if path == "" {
		path = "/run/fleet-tokend/tokens.sock"
	}
	return &Agent{Path: path, ReconnectDeadline: 2 * time.Second, Timeout: 15 * time.Second}
}

// Token returns the token of a kind and id and its expiry (Unix seconds).
func (a *Agent) Token(kind, id string) (string, int64, error) {
	replies, err := a.Send([]string{"GET " + kind + " " + id})
	if err != nil {
		return "", 0, err
	}
	return ParseToken(replies[0])
}

// Send sends requests (one line each; not METRICS or QUIT, which do not get one reply line) and
// returns their replies, in order.
func (a *Agent) Send(requests []string) ([]string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var replies []string
	for start := 0; start < len(requests); start += window {
		end := min(start+window, len(requests))
		batch, err := a.pipeline(requests[start:end])
		if err != nil {
			return nil, err
		}
		replies = append(replies, batch...)
	}
	return replies, nil
}

// Close closes the connection.
func (a *Agent) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drop()
}

func (a *Agent) pipeline(requests []string) ([]string, error) {
	var replies []string
	var deadline time.Time
	for len(replies) < len(requests) {
		err := a.exchange(requests[len(replies):], &replies)
		if err == nil {
			break
		}
		a.drop()
		if !closedOrAbsent(err) {
			return nil, err // a time-out, or a refusal to connect (permissions)
		}
		// The agent closed the connection (it stopped or restarted), or is not there yet: keep
		// the replies that came, and send the rest again on a new connection.
		a.lost = true
		if deadline.IsZero() {
			deadline = time.Now().Add(a.ReconnectDeadline)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("fleet-tokend unreachable at %s: %w", a.Path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return replies, nil
}

func (a *Agent) exchange(unanswered []string, replies *[]string) error {
	if a.conn == nil {
		conn, err := net.Dial("unix", a.Path)
		if err != nil {
			return err
		}
		a.conn, a.reader = conn, bufio.NewReaderSize(conn, 64<<10)
		if a.lost {
			a.lost = false
			log.Printf("reconnected to %s; sending %d unanswered requests again", a.Path, len(unanswered))
		}
	}
	if err := a.conn.SetDeadline(time.Now().Add(a.Timeout)); err != nil {
		return err
	}
	// Pipelined: every request written before any reply is read.
	if _, err := io.WriteString(a.conn, strings.Join(unanswered, "\n")+"\n"); err != nil {
		return err
	}
	for range unanswered {
		line, err := a.reader.ReadString('\n')
		if err != nil {
			return err // io.EOF: the agent closed the connection
		}
		*replies = append(*replies, strings.TrimSuffix(line, "\n"))
	}
	return nil
}

func (a *Agent) drop() {
	if a.conn != nil {
		a.conn.Close()
	}
	a.conn, a.reader = nil, nil
}

func closedOrAbsent(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

// ParseToken returns the token and expiry of an `OK <token> <expires-at>` reply, or a
// *TokenError for an ERR reply.
func ParseToken(reply string) (string, int64, error) {
	fields := strings.Split(reply, " ")
	if fields[0] == "OK" && len(fields) == 3 {
		expiresAt, err := strconv.ParseInt(fields[2], 10, 64)
		return fields[1], expiresAt, err
	}
	if fields[0] == "ERR" && len(fields) >= 2 {
		return "", 0, &TokenError{Code: fields[1], Text: strings.Join(fields[2:], " ")}
	}
	return "", 0, fmt.Errorf("not a token reply: %.60q", reply)
}

func main() {
	socket := flag.String("socket", "", "the agent's socket (default $FLEET_TOKEND_SOCKET, else /run/fleet-tokend/tokens.sock)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("fleet-tokend-client: ")
	agent := NewAgent(*socket)
	defer agent.Close()
	input := bufio.NewScanner(os.Stdin)
	for input.Scan() {
		var batch []string
		for _, request := range strings.Split(input.Text(), ";") {
			if request = strings.TrimSpace(request); request != "" {
				batch = append(batch, request)
			}
		}
		replies, err := agent.Send(batch)
		if err != nil {
			log.Print(err)
			os.Exit(69)
		}
		for _, reply := range replies {
			fmt.Println(reply)
		}
	}
}
