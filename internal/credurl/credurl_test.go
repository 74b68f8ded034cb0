package credurl

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// TestRedact hides the password (or a userinfo without a colon) and keeps the rest.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"kafkas://alice:s3cret@k0:9093?sasl=plain": "kafkas://alice:xxxxx@k0:9093?sasl=plain",
		"kafkas://s3cret@k0:9093":                  "kafkas://xxxxx@k0:9093",
		"alice:p@ss@k0:9092":                       "alice:xxxxx@k0:9092",
		"kafka://k0:9092,k1:9092":                  "kafka://k0:9092,k1:9092",
		"kafka://k0:9092/?x=a@b":                   "kafka://k0:9092/?x=a@b",
		"rediss://:s3cret@r0:6380/1":               "rediss://:xxxxx@r0:6380/1",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestErrorHidesThePassword: a net/url parse error quotes the whole URL; the wrapped error
// shows it redacted and still unwraps to the original.
func TestErrorHidesThePassword(t *testing.T) {
	raw := "redis://u:s3cret@host:port/0"
	_, perr := url.Parse(raw)
	if perr == nil || !strings.Contains(perr.Error(), "s3cret") {
		t.Fatalf("want a parse error quoting the password, got %v", perr)
	}
	err := fmt.Errorf("queueConfig.url: %w", Error(perr, raw))
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "u:xxxxx@host") {
		t.Fatalf("message %q", err)
	}
	var ue *url.Error
	if !errors.As(err, &ue) || !errors.Is(err, perr) {
		t.Fatal("the redacted error does not unwrap to the parse error")
	}
	if Error(nil, raw) != nil {
		t.Fatal("Error(nil) is not nil")
	}
}
