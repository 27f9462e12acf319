package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"time"
)

// rawPoster sends the write phases' POSTs over plain HTTP/1.1 keep-alive connections: the
// request written in one buffer, the answer read from the connection by the caller, no
// per-connection goroutines. net/http's client spends about half of the load generator's
// CPU on a write (a read loop and a write loop goroutine per connection, a handoff between
// them and the caller, header maps), and the load generator shares the machine's two cores
// with the service it measures. Every other request (reads, admin, checks) goes through
// net/http.
//
// It speaks just what the service answers these requests with: a status line, headers, and
// a body sized by Content-Length or chunked. A connection that fails or that the server
// closes is dropped, never reused; an answer it cannot parse is an error.
type rawPoster struct {
	addr    string // host:port
	host    string // the Host header
	timeout time.Duration
	dialer  net.Dialer
	idle    chan *rawConn
}

type rawConn struct {
	c        net.Conn
	r        *bufio.Reader
	buf      []byte
	lastUsed time.Time
}

// rawIdleMax is how long an idle connection is reused: well under the service's idle
// timeout (120 s), so a request is not written to a connection the server is closing.
const rawIdleMax = 30 * time.Second

// newRawPoster returns a poster to target (http://host:port) keeping up to maxIdle
// connections open between requests.
func newRawPoster(target string, timeout time.Duration, maxIdle int) (*rawPoster, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("raw poster: want an http://host:port target, got %q", target)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &rawPoster{addr: addr, host: u.Host, timeout: timeout,
		dialer: net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, idle: make(chan *rawConn, maxIdle)}, nil
}

// post sends body to path with the Authorization header auth and returns the answer (its
// status and, for errors, error code and message, as api.send does).
func (p *rawPoster) post(ctx context.Context, path, auth string, body []byte) (answer, error) {
	if err := ctx.Err(); err != nil {
		return answer{}, err
	}
	rc, err := p.conn(ctx)
	if err != nil {
		return answer{}, err
	}
	status, respBody, keep, err := rc.roundTrip(p.host, path, auth, body, time.Now().Add(p.timeout))
	if err != nil {
		rc.c.Close()
		return answer{}, err
	}
	if keep {
		rc.lastUsed = time.Now()
		select {
		case p.idle <- rc:
		default:
			rc.c.Close()
		}
	} else {
		rc.c.Close()
	}
	return newAnswer(status, respBody), nil
}

func (p *rawPoster) conn(ctx context.Context) (*rawConn, error) {
	for {
		select {
		case rc := <-p.idle:
			if time.Since(rc.lastUsed) < rawIdleMax {
				return rc, nil
			}
			rc.c.Close()
		default:
			c, err := p.dialer.DialContext(ctx, "tcp", p.addr)
			if err != nil {
				return nil, err
			}
			return &rawConn{c: c, r: bufio.NewReaderSize(c, 4<<10)}, nil
		}
	}
}

// close closes the idle connections.
func (p *rawPoster) close() {
	for {
		select {
		case rc := <-p.idle:
			rc.c.Close()
		default:
			return
		}
	}
}

// roundTrip writes one POST and reads its answer; keep says whether the connection can
// carry another request.
func (rc *rawConn) roundTrip(host, path, auth string, body []byte, deadline time.Time) (status int, respBody []byte, keep bool, err error) {
	if err := rc.c.SetDeadline(deadline); err != nil {
		return 0, nil, false, err
	}
	b := rc.buf[:0]
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nAuthorization: "...)
	b = append(b, auth...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	rc.buf = b
	if _, err := rc.c.Write(b); err != nil {
		return 0, nil, false, err
	}
	return readResponse(rc.r)
}

var errBadResponse = errors.New("malformed HTTP response")

// readResponse reads one HTTP/1.1 response: its status, its body (Content-Length or
// chunked), and whether the connection stays open.
func readResponse(r *bufio.Reader) (status int, body []byte, keep bool, err error) {
	line, err := readLine(r)
	if err != nil {
		return 0, nil, false, err
	}
	// "HTTP/1.1 202 Accepted"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errBadResponse, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 {
		return 0, nil, false, fmt.Errorf("%w: status line %q", errBadResponse, line)
	}
	keep = line[7] == '1' // HTTP/1.1 keeps the connection unless told otherwise
	length, chunked := -1, false
	for {
		h, err := readLine(r)
		if err != nil {
			return 0, nil, false, err
		}
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, false, fmt.Errorf("%w: header %q", errBadResponse, h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, nil, false, fmt.Errorf("%w: Content-Length %q", errBadResponse, value)
			}
		case asciiEqualFold(name, "Transfer-Encoding"):
			chunked = asciiEqualFold(value, "chunked")
			if !chunked {
				return 0, nil, false, fmt.Errorf("%w: Transfer-Encoding %q", errBadResponse, value)
			}
		case asciiEqualFold(name, "Connection"):
			if asciiEqualFold(value, "close") {
				keep = false
			}
		}
	}
	switch {
	case chunked:
		body, err = readChunked(r)
	case length >= 0:
		body = make([]byte, length)
		_, err = io.ReadFull(r, body)
	case status == 204 || status == 304 || status < 200:
	default: // the body runs to the end of the connection
		body, err = io.ReadAll(io.LimitReader(r, 1<<20))
		keep = false
	}
	if err != nil {
		return 0, nil, false, err
	}
	return status, body, keep, nil
}

// readChunked reads a chunked body and its (ignored) trailer.
func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 32)
		if err != nil || n < 0 || len(body)+int(n) > 1<<20 {
			return nil, fmt.Errorf("%w: chunk size %q", errBadResponse, line)
		}
		if n == 0 {
			for { // trailer, up to its blank line
				t, err := readLine(r)
				if err != nil {
					return nil, err
				}
				if len(t) == 0 {
					return body, nil
				}
			}
		}
		start := len(body)
		body = append(body, make([]byte, n)...)
		if _, err := io.ReadFull(r, body[start:]); err != nil {
			return nil, err
		}
		if crlf, err := readLine(r); err != nil || len(crlf) != 0 {
			return nil, fmt.Errorf("%w: chunk not followed by CRLF", errBadResponse)
		}
	}
}

// readLine reads a line without its CRLF (or LF); a line longer than the reader's buffer
// is an error.
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line too long", errBadResponse)
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
