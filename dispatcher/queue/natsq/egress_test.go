package natsq

import (
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// TestDialThroughEgress: a binding's NATS URL on a denied address is refused by the dialer.
func TestDialThroughEgress(t *testing.T) {
	p := &Provider{Dial: (&egress.Policy{}).Dialer(0)}
	defer p.Close()
	_, err := p.js("nats://169.254.169.254:4222")
	if err == nil || !strings.Contains(err.Error(), "egress denied") {
		t.Fatalf("err %v, want an egress denial", err)
	}
}

// TestConnectErrorHidesThePassword: a refused connection's error names the URL without its
// password.
func TestConnectErrorHidesThePassword(t *testing.T) {
	p := &Provider{Dial: (&egress.Policy{}).Dialer(0)}
	defer p.Close()
	_, err := p.js("nats://alice:s3cret@169.254.169.254:4222")
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "alice:xxxxx@") {
		t.Fatalf("err %v, want a refusal naming alice:xxxxx@ and not the password", err)
	}
}
