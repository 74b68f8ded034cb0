package proxy

import (
	"errors"
	"io"
	"strings"
	"testing"
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
