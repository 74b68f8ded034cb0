package guard

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

func piiCheck(a Action, window int) ResponseCheck {
	return ResponseCheck{Name: "pii", Type: "pii", Find: PIIFinder(pii.New(pii.Options{MinScore: 0.5})), Action: a, Window: window}
}

// feed streams chunks through a new guard and returns what the client receives and the largest
// number of bytes held back after any Write.
func feed(t *testing.T, g *StreamGuard, chunks []string) (string, int) {
	t.Helper()
	var out strings.Builder
	in, maxHeld := 0, 0
	for _, c := range chunks {
		s, err := g.Write(0, c)
		if err != nil {
			t.Fatal(err)
		}
		in += len(c)
		out.WriteString(s)
		maxHeld = max(maxHeld, in-out.Len())
	}
	s, err := g.Close(0)
	if err != nil {
		t.Fatal(err)
	}
	out.WriteString(s)
	return out.String(), maxHeld
}

// TestRedactionAcrossEveryChunkBoundary splits a response at every byte (and into 3-byte
// tokens) and checks the value never reaches the client while the rest is unchanged.
func TestRedactionAcrossEveryChunkBoundary(t *testing.T) {
	text := "Sure! Write to jane.doe@example.com or call +44 20 7946 0958; card 4111 1111 1111 1111 — merci, à bientôt."
	want := "Sure! Write to <EMAIL_ADDRESS> or call <PHONE_NUMBER>; card <CREDIT_CARD> — merci, à bientôt."
	for cut := 1; cut < len(text); cut++ {
		g := NewStreamGuard(context.Background(), nil, Audit{}, piiCheck(Redact, 64))
		got, _ := feed(t, g, []string{text[:cut], text[cut:]})
		if got != want {
			t.Fatalf("split at %d: got %q", cut, got)
		}
	}
	var toks []string
	for i := 0; i < len(text); i += 3 {
		toks = append(toks, text[i:min(i+3, len(text))])
	}
	g := NewStreamGuard(context.Background(), nil, Audit{}, piiCheck(Redact, 64))
	got, held := feed(t, g, toks)
	if got != want {
		t.Fatalf("3-byte tokens: got %q", got)
	}
	if held > 2*64 {
		t.Fatalf("held back %d bytes, bound is 2*window", held)
	}
}

func TestHoldBackIsBounded(t *testing.T) {
	long := strings.Repeat("plain words without any value at all ", 200)
	g := NewStreamGuard(context.Background(), nil, Audit{}, piiCheck(Redact, 32))
	var chunks []string
	for i := 0; i < len(long); i += 5 {
		chunks = append(chunks, long[i:min(i+5, len(long))])
	}
	got, held := feed(t, g, chunks)
	if got != long {
		t.Fatal("text without values must pass unchanged")
	}
	if held > 32+5 {
		t.Fatalf("held back %d bytes with a 32-byte window", held)
	}
}

func TestPrivateKeyBlockIsDroppedWhole(t *testing.T) {
	key := "-----BEGIN OPENSSH PRIVATE KEY-----\n" + strings.Repeat("b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n", 40) + "-----END OPENSSH PRIVATE KEY-----"
	text := "Here is the key:\n" + key + "\nKeep it safe."
	for _, size := range []int{1, 7, 50, 4096} {
		var chunks []string
		for i := 0; i < len(text); i += size {
			chunks = append(chunks, text[i:min(i+size, len(text))])
		}
		g := NewStreamGuard(context.Background(), nil, Audit{}, piiCheck(Redact, 64))
		got, _ := feed(t, g, chunks)
		if got != "Here is the key:\n<PRIVATE_KEY>\nKeep it safe." {
			t.Fatalf("chunk %d: got %q", size, got)
		}
	}
}

func TestStreamBlockAndFlag(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	g := NewStreamGuard(context.Background(), m, Audit{}, piiCheck(Block, 64))
	got, _ := feed(t, g, []string{"the number is 4111 1111 ", "1111 1111 ok"})
	if _, blocked := g.Blocked(); !blocked || strings.Contains(got, "4111") {
		t.Fatalf("block: got %q", got)
	}
	g = NewStreamGuard(context.Background(), m, Audit{}, piiCheck(Flag, 64))
	text := "mail a@example.com"
	if got, _ := feed(t, g, []string{text[:9], text[9:]}); got != text {
		t.Fatalf("flag must pass text: %q", got)
	}
	if testutil.ToFloat64(m.Blocks.WithLabelValues("pii", "block")) != 1 || testutil.ToFloat64(m.Blocks.WithLabelValues("pii", "flag")) != 1 {
		t.Fatal("stream actions are counted once per response")
	}
}

func TestChoicesAreIndependent(t *testing.T) {
	g := NewStreamGuard(context.Background(), nil, Audit{}, piiCheck(Redact, 64))
	a1, _ := g.Write(0, "mail jane@exa")
	b1, _ := g.Write(1, "no value here, just text that is long enough to pass the window of sixty-four")
	a2, _ := g.Write(0, "mple.com done")
	a3, _ := g.Close(0)
	b2, _ := g.Close(1)
	if a1+a2+a3 != "mail <EMAIL_ADDRESS> done" || !strings.HasPrefix(b1+b2, "no value here") {
		t.Fatalf("choice 0 %q, choice 1 %q", a1+a2+a3, b1+b2)
	}
}

func TestPatternFinderOnStream(t *testing.T) {
	ch := ResponseCheck{Name: "deny", Type: "pattern", Find: PatternFinder(compileAll(t, `(?i)project\s+bluebird`)), Action: Redact, Window: 32}
	g := NewStreamGuard(context.Background(), nil, Audit{}, ch)
	got, _ := feed(t, g, []string{"about Project Blue", "bird, the plan"})
	if got != "about <PATTERN>, the plan" {
		t.Fatalf("%q", got)
	}
}
