package proxy

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestEventReader(t *testing.T) {
	in := ": comment\r\nevent: x\ndata: {\"a\":1}\n\ndata: line1\ndata:line2\n\n\n" + "data: " + strings.Repeat("y", 40000) + "\n\ndata: [DONE]\n\n"
	n := 0
	r := NewEventReader(strings.NewReader(in), func() { n++ })
	want := []string{`{"a":1}`, "line1\nline2", strings.Repeat("y", 40000), "[DONE]"}
	for i, w := range want {
		got, err := r.Next()
		if err != nil || string(got) != w {
			t.Fatalf("event %d: %.40q %v", i, got, err)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.EOF) || n != 4 {
		t.Fatalf("end: %v after %d events", err, n)
	}
	r = NewEventReader(strings.NewReader("data: "+strings.Repeat("z", MaxEventBytes+10)+"\n\n"), nil)
	if _, err := r.Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("oversized event: %v", err)
	}
	r = NewEventReader(strings.NewReader("data: last"), nil)
	if got, err := r.Next(); err != nil || string(got) != "last" {
		t.Fatalf("unterminated last event: %q %v", got, err)
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err              error
		idempotent, want bool
	}{
		{&StatusError{Status: 503}, false, true}, {&StatusError{Status: 429}, false, true},
		{&StatusError{Status: 500}, true, false}, {&StatusError{Status: 400}, true, false},
		{&ConnError{Err: io.EOF}, false, true}, {&ConnError{Err: io.EOF, Sent: true}, false, false},
		{&ConnError{Err: io.EOF, Sent: true}, true, true}, {ErrFirstTokenTimeout, true, false},
	} {
		if got := Retryable(tc.err, tc.idempotent); got != tc.want {
			t.Errorf("Retryable(%v, idempotent=%v) = %v", tc.err, tc.idempotent, got)
		}
	}
}

// TestHasEvent: a whole event with a data line is buffered; a partial one, a comment-only block
// or nothing is not.
func TestHasEvent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"data: a\n\ndata: b\n\n", true},
		{"data: a\n\ndata: b\n", false},
		{"data: a\n\n: keep-alive\n\n", false},
		{"data: a\n\nid: 3\ndata: b\n\n", true},
		{"data: a\r\n\r\ndata: b\r\n\r\n", true},
		{"data: a\n\n", false},
	} {
		e := NewEventReader(strings.NewReader(tc.in), nil)
		if _, err := e.Next(); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if got := e.HasEvent(); got != tc.want {
			t.Errorf("%q: HasEvent after the first event = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestEventReaderBuffered checks that events read from the reader's buffer without a copy (one
// data line and a blank line, wholly buffered) are what the line-by-line path returns: the same
// streams read whole and one byte per read (which leaves no whole event buffered) give the same
// events, and a returned event's slice cannot be appended into the bytes that follow it.
func TestEventReaderBuffered(t *testing.T) {
	streams := []string{
		"data: {\"a\":1}\n\ndata:{\"b\":2}\n\ndata: [DONE]\n\n",
		"data:\n\ndata: \n\ndata:  two spaces\n\n",
		"data: crlf\r\n\r\ndata: lf\n\ndata: cr in line\r\n\ndata: x\n\n",
		": c\ndata: after comment\n\nevent: e\ndata: after field\n\ndata: a\ndata: b\n\n",
		"data: one\n\n\n\ndata: two\n\ndata: last without blank line\n",
		"id: 1\n\ndata: only\n\nretry: 5\n\n",
	}
	frames := 0
	read := func(r io.Reader) []string {
		var got []string
		e := NewEventReader(r, nil)
		for {
			ev, err := e.Next()
			if err != nil {
				return append(got, "err: "+err.Error())
			}
			got = append(got, string(ev))
			if f := e.Frame(); f != nil {
				frames++
				if string(f) != "data: "+string(ev)+"\n\n" {
					t.Errorf("frame %q of event %q", f, ev)
				}
			}
		}
	}
	for _, s := range streams {
		whole, bytewise := read(strings.NewReader(s)), read(iotest.OneByteReader(strings.NewReader(s)))
		if !slices.Equal(whole, bytewise) {
			t.Errorf("%q:\n whole    %q\n bytewise %q", s, whole, bytewise)
		}
	}
	if frames == 0 {
		t.Error("no event had its frame")
	}
	// The first event fills the buffer (line by line); the second comes from the buffer.
	e := NewEventReader(strings.NewReader("data: a\n\ndata: b\n\ndata: c\n\n"), nil)
	for _, want := range []string{"a", "b", "c"} {
		ev, err := e.Next()
		if err != nil || string(ev) != want {
			t.Fatalf("event %q %v after an append to the one before, want %q", ev, err, want)
		}
		_ = append(ev, "XXXXXXXXXXXX"...)
	}
}
