package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// MaxEventBytes bounds one server-sent event; a larger one fails the stream.
const MaxEventBytes = 1 << 20

// ErrEventTooLarge is returned for an event over MaxEventBytes.
var ErrEventTooLarge = errors.New("backend event larger than 1 MiB")

// Done is the data of the stream's last event.
var Done = []byte("[DONE]")

// EventReader reads the data of server-sent events. It holds at most one event: the caller
// writes it to the client before reading the next, which gives backpressure all the way to the
// backend's socket.
type EventReader struct {
	r       *bufio.Reader
	onEvent func()
	buf     []byte
	long    []byte
	done    bool   // the last event returned was [DONE]
	frame   []byte // the last event's "data: ...\n\n" bytes, when buffered returned it

	// The idle clock of an Upstream's stream, kept here rather than in the Exchange so that an
	// event touches only the reader's memory: last is the monotonic time since origin of the
	// latest event (0 before the first), read by the exchange's timer; onFirst runs at the
	// first event only.
	timed   bool
	seen    bool
	origin  time.Time
	last    atomic.Int64
	onFirst func()
}

// NewEventReader reads events from r; onEvent (optional) is called as each event completes.
func NewEventReader(r io.Reader, onEvent func()) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, eventBufferBytes), onEvent: onEvent}
}

// eventBufferBytes is the size of an EventReader's buffer.
const eventBufferBytes = 32 << 10

// Next returns the data of the next event (its "data:" lines joined by newlines), valid until
// the following call. io.EOF ends a stream cleanly only after [DONE]; before, it is
// io.ErrUnexpectedEOF.
func (e *EventReader) Next() ([]byte, error) {
	e.frame = nil
	if e.r.Buffered() == 0 {
		// Wait for the backend's next write (one read: a token event usually arrives whole).
		if _, err := e.r.Peek(1); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("read backend stream: %w", err)
		}
	}
	if v, ok := e.buffered(); ok {
		e.event(v)
		return v, nil
	}
	e.buf = e.buf[:0]
	has := false
	for {
		line, err := e.readLine()
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			if errors.Is(err, ErrEventTooLarge) {
				return nil, err
			}
			return nil, fmt.Errorf("read backend stream: %w", err)
		}
		if eof && len(line) == 0 {
			if has {
				// A last event without its blank line.
				e.event(e.buf)
				return e.buf, nil
			}
			return nil, io.EOF
		}
		line = trimEOL(line)
		if len(line) == 0 {
			if has {
				e.event(e.buf)
				return e.buf, nil
			}
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // comments, event:, id:, retry: carry nothing the gateway forwards
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if has {
			e.buf = append(e.buf, '\n')
		}
		if len(e.buf)+len(v) > MaxEventBytes {
			return nil, ErrEventTooLarge
		}
		e.buf = append(e.buf, v...)
		has = true
	}
}

// HasEvent reports whether a whole event with data is already buffered, so that Next returns
// it without waiting for the backend.
func (e *EventReader) HasEvent() bool {
	n := e.r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := e.r.Peek(n) // never reads: n bytes are buffered
	end := bytes.Index(b, []byte("\n\n"))
	if crlf := bytes.Index(b, []byte("\r\n\r\n")); crlf >= 0 && (end < 0 || crlf < end) {
		end = crlf
	}
	if end < 0 {
		return false
	}
	b = b[:end]
	return bytes.HasPrefix(b, []byte("data:")) || bytes.Contains(b, []byte("\ndata:"))
}

// readLine returns the next line; lines longer than the reader's buffer are assembled in a
// separate buffer, up to MaxEventBytes.
func (e *EventReader) readLine() ([]byte, error) {
	line, err := e.r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	e.long = append(e.long[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		if len(e.long) > MaxEventBytes {
			return nil, ErrEventTooLarge
		}
		line, err = e.r.ReadSlice('\n')
		e.long = append(e.long, line...)
	}
	return e.long, err
}

// buffered returns the data of the next event without copying it when the event is one
// "data:" line ending in LF and a blank line, all in the reader's buffer (a model server's
// token chunk): what the line-by-line path would return, as a slice of the buffer that stays
// valid until the next read. Anything else (comments, other fields, several data lines, CR
// line ends, a partly read event) is left to that path.
func (e *EventReader) buffered() ([]byte, bool) {
	n := e.r.Buffered()
	if n < len("data:\n\n") {
		return nil, false
	}
	b, _ := e.r.Peek(n) // never reads: n bytes are buffered
	if !bytes.HasPrefix(b, dataField) {
		return nil, false
	}
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || nl+1 >= len(b) || b[nl+1] != '\n' || b[nl-1] == '\r' {
		return nil, false
	}
	v := b[len(dataField):nl]
	if len(v) > 0 && v[0] == ' ' {
		v = v[1:]
		e.frame = b[: nl+2 : nl+2]
	}
	_, _ = e.r.Discard(nl + 2) // buffered: cannot fail
	return v[:len(v):len(v)], true
}

var dataField = []byte("data:")

// Frame returns the last event as the backend wrote it, "data: ", its data and "\n\n", when
// Next returned it from the reader's buffer and it had that form (one space after "data:");
// nil otherwise. Valid until the next call to Next.
func (e *EventReader) Frame() []byte { return e.frame }

// event records an event's completion: [DONE], the idle clock, the callbacks.
func (e *EventReader) event(data []byte) {
	e.done = bytes.Equal(data, Done)
	if e.timed {
		e.last.Store(max(int64(time.Since(e.origin)), 1))
		if !e.seen {
			e.seen = true
			e.onFirst()
		}
	}
	if e.onEvent != nil {
		e.onEvent()
	}
}

// trimEOL drops the line's trailing CR and LF bytes (bytes.TrimRight(line, "\r\n") without
// building a character set per line).
func trimEOL(line []byte) []byte {
	n := len(line)
	for n > 0 && (line[n-1] == '\n' || line[n-1] == '\r') {
		n--
	}
	return line[:n]
}
