package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"time"
)

// sseEvent is one dispatched Server-Sent Event. Its slices alias the reader's buffers and
// are valid only until the next call to next.
type sseEvent struct {
	id    []byte // the id field of this event; nil when it had none
	name  []byte // the event field; "message" when absent
	data  []byte // the data lines joined with '\n'
	retry int64  // the last retry field seen on the stream, ms; 0 if none
}

// sseReader parses the text/event-stream wire format (WHATWG HTML, "Server-sent events",
// 9.2.6) from a byte stream: lines end in LF, CRLF or CR; a line starting with ':' is a
// comment; "field: value" loses one space after the colon; a blank line dispatches the
// event; an event without data is not dispatched.
type sseReader struct {
	sc       *bufio.Scanner
	comments int64 // comment lines read so far (": heartbeat", ": connected")
	retry    int64 // the last retry field, ms

	id     []byte
	hasID  bool
	name   []byte
	data   []byte
	hasDat bool
}

// newSSEReader reads r with a buffer of size bytes that grows up to maxLine for long lines.
func newSSEReader(r io.Reader, size, maxLine int) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, size), max(size, maxLine))
	sc.Split(scanSSELines)
	return &sseReader{sc: sc}
}

// next returns the next dispatched event, or the error that ended the stream (io.EOF on a
// clean end; a partial event is then discarded, as the spec says).
func (s *sseReader) next() (sseEvent, error) {
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) > 0 {
			s.field(line)
			continue
		}
		if !s.hasDat {
			s.resetEvent()
			continue
		}
		ev := sseEvent{name: s.name, data: s.data, retry: s.retry}
		if s.hasID {
			ev.id = s.id
		}
		if len(ev.name) == 0 {
			ev.name = []byte("message")
		}
		if n := len(ev.data); n > 0 && ev.data[n-1] == '\n' {
			ev.data = ev.data[:n-1]
		}
		s.resetEvent()
		return ev, nil
	}
	if err := s.sc.Err(); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{}, io.EOF
}

func (s *sseReader) resetEvent() {
	s.id, s.hasID, s.name, s.data, s.hasDat = s.id[:0], false, s.name[:0], s.data[:0], false
}

// field processes one non-blank line.
func (s *sseReader) field(line []byte) {
	if line[0] == ':' {
		s.comments++
		return
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "event":
		s.name = append(s.name[:0], value...)
	case "data":
		s.data = append(append(s.data, value...), '\n')
		s.hasDat = true
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			s.id, s.hasID = append(s.id[:0], value...), true
		}
	case "retry":
		if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= 0 {
			s.retry = n
		}
	}
}

// scanSSELines is a bufio.SplitFunc for lines ending in LF, CRLF or a lone CR. A line cut
// off by the end of the stream is dropped: the event it belongs to is incomplete anyway.
func scanSSELines(data []byte, atEOF bool) (int, []byte, error) {
	nl := bytes.IndexByte(data, '\n')
	scope := data
	if nl >= 0 {
		scope = data[:nl]
	}
	if cr := bytes.IndexByte(scope, '\r'); cr >= 0 {
		switch {
		case cr+1 < len(data) && data[cr+1] == '\n':
			return cr + 2, data[:cr], nil
		case cr+1 < len(data) || atEOF:
			return cr + 1, data[:cr], nil
		default:
			return 0, nil, nil // an LF may follow in the next read
		}
	}
	if nl >= 0 {
		return nl + 1, data[:nl], nil
	}
	if atEOF {
		return len(data), nil, bufio.ErrFinalToken
	}
	return 0, nil, nil
}

// topEvent is what fan-out needs from a leaderboard.updated event.
type topEvent struct {
	version int64
	ts      time.Time // when the service rendered it (data.ts)
}

// parseTopEvent reads the version (the id field, else data.version) and data.ts of a
// leaderboard.updated event. It finds the top-level "ts" and "version" keys by searching
// from the end, which holds for the service's sorted-key JSON; anything else falls back
// to a full decode.
func parseTopEvent(ev sseEvent) (topEvent, bool) {
	var out topEvent
	tsKey := []byte(`"ts":"`)
	if i := bytes.LastIndex(ev.data, tsKey); i >= 0 {
		rest := ev.data[i+len(tsKey):]
		if j := bytes.IndexByte(rest, '"'); j > 0 {
			if t, err := time.Parse(time.RFC3339Nano, string(rest[:j])); err == nil {
				out.ts = t
			}
		}
	}
	if ev.id != nil {
		if v, err := strconv.ParseInt(string(ev.id), 10, 64); err == nil {
			out.version = v
		}
	}
	if out.ts.IsZero() || ev.id == nil {
		var full struct {
			Version *int64    `json:"version"`
			TS      time.Time `json:"ts"`
		}
		if err := json.Unmarshal(ev.data, &full); err != nil || full.Version == nil || full.TS.IsZero() {
			return out, false
		}
		if ev.id == nil {
			out.version = *full.Version
		}
		out.ts = full.TS
	}
	return out, true
}
