package guard

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// auditLog collects the log lines written through its context.
type auditLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *auditLog) ctx(parent context.Context) context.Context {
	return klog.NewContext(parent, funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, args)
		l.mu.Unlock()
	}, funcr.Options{}))
}

// wait returns the lines once one contains want, or fails after a second.
func (l *auditLog) wait(t *testing.T, want string) []string {
	t.Helper()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		l.mu.Lock()
		lines := append([]string(nil), l.lines...)
		l.mu.Unlock()
		for _, x := range lines {
			if strings.Contains(x, want) {
				return lines
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Fatalf("no audit line with %s in %q", want, l.lines)
	return nil
}

// A response check's action is audited however the response ends: at the last choice's close,
// when a check blocks (Close is then never reached), and when the request ends first (the client
// went away mid-stream), with the span lengths and never the text.
func TestStreamAuditLines(t *testing.T) {
	const card = "4111 1111 1111 1111"
	for _, tc := range []struct {
		name   string
		action Action
		close  bool
		end    string
	}{
		{"redaction completed", Redact, true, `"end"="complete"`},
		{"block", Block, false, `"end"="blocked"`},
		{"redaction cancelled", Redact, false, `"end"="cancelled"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log auditLog
			ctx, cancel := context.WithCancel(log.ctx(context.Background()))
			g := NewStreamGuard(ctx, nil, Audit{Tenant: "ns/t", Pool: "ns/p"}, piiCheck(tc.action, 16))
			if _, err := g.Write(0, "card "+card+" and more text after it, long enough to pass the window"); err != nil {
				t.Fatal(err)
			}
			if tc.close {
				if _, err := g.Close(0); err != nil {
					t.Fatal(err)
				}
			}
			if tc.action == Block {
				if _, blocked := g.Blocked(); !blocked {
					t.Fatal("not blocked")
				}
			}
			if !tc.close && tc.action != Block {
				cancel()
			}
			lines := log.wait(t, tc.end)
			defer cancel()
			n := 0
			for _, l := range lines {
				if strings.Contains(l, card) {
					t.Fatalf("audit line carries the text: %s", l)
				}
				if strings.Contains(l, `"guardrail"="pii"`) {
					n++
					if !strings.Contains(l, `"action"="`+string(tc.action)+`"`) || !strings.Contains(l, `"spanLengths"=[19]`) {
						t.Fatalf("audit line %s", l)
					}
				}
			}
			cancel()
			time.Sleep(20 * time.Millisecond)
			log.mu.Lock()
			defer log.mu.Unlock()
			if total := len(log.lines); n != 1 || total != len(lines) {
				t.Fatalf("%d audit lines (%d after the request ended), want exactly one: %q", n, total, log.lines)
			}
		})
	}
}
