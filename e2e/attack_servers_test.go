package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testAttackDriverDebugWithoutToken is TestDriver's subtest AttackDriverDebugWithoutToken: a
// process on the node (host network, as a hostNetwork tenant pod is) calls the driver's debug
// endpoint without the bearer token, with a wrong one and with the right one in the wrong
// scheme, trying to inject a GPU failure and to pause prepares. Every call must be refused with
// 401 and leave the devices untainted.
func testAttackDriverDebugWithoutToken(t *testing.T, h *driverHarness) {
	h.use(t, "mock:dgxh100")
	c := &http.Client{Timeout: 5 * time.Second}
	for _, auth := range []string{"", "Bearer " + strings.Repeat("0", len(h.token)), "Basic " + h.token, "Bearer " + h.token + "x"} {
		for _, path := range []string{"/debug/health?gpu=gpu-0&kind=lost", "/debug/prepare-pause?duration=5m"} {
			req, err := http.NewRequest("POST", driverDebug+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST %s with Authorization %q: %s %s, want 401", path, redact(auth), resp.Status, b)
			}
		}
	}
	devs, _, err := h.devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if len(d.Taints) > 0 {
			t.Errorf("device %s tainted after refused debug calls: %v", d.Name, d.Taints)
		}
	}
	// The right token still works (the endpoint is not simply down).
	var pid struct {
		PID int `json:"pid"`
	}
	if err := h.debug("GET", "/debug/pid", &pid); err != nil || pid.PID <= 0 {
		t.Fatalf("debug endpoint with the token: pid %d, %v", pid.PID, err)
	}
}

// redact shows a credential's scheme and length only.
func redact(auth string) string {
	scheme, tok, _ := strings.Cut(auth, " ")
	return fmt.Sprintf("%s <%d bytes>", scheme, len(tok))
}

// gweRevokeObjects is a Tenant whose one API key the attack below revokes.
const gweRevokeObjects = `apiVersion: v1
kind: Secret
metadata:
  name: e2e-keys-revoke
  labels: {neuronetes.io/api-keys: "true"}
stringData:
  key: ` + gweKeyRevoke + `
---
apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: revoke}
spec:
  apiKeys: [{secretName: e2e-keys-revoke}]
  models: [demo-llm]
`

const gweKeyRevoke = "sk-e2e-revoke-5d21a"

// attackWebSocketAfterKeyRevoked is TestGateway's subtest AttackWebSocketAfterKeyRevoked: a
// client opens a WebSocket with an API key, the key is revoked (its Secret deleted), and the
// client keeps sending requests on the socket it already holds. The gateway must close it with
// 1008 (policy violation) instead of serving them.
func (g *gweEnv) attackWebSocketAfterKeyRevoked(t *testing.T) {
	g.e.Apply(t, g.ns, gweRevokeObjects)
	msg := []byte(`{"model":"demo-llm","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"still mine?"}]}`)
	answer := func(ctx context.Context, c *websocket.Conn) error {
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			return err
		}
		for {
			_, m, err := c.Read(ctx)
			if err != nil {
				return err
			}
			if strings.Contains(string(m), `"error"`) {
				return fmt.Errorf("error answer %s", m)
			}
			if string(m) == "[DONE]" {
				return nil
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	var c *websocket.Conn
	Eventually(t, 30*time.Second, "a WebSocket with the new key answers", func() (bool, error) {
		conn, _, err := websocket.Dial(ctx, "ws://"+g.addr+"/v1/chat/completions",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + gweKeyRevoke}}})
		if err != nil {
			return false, err
		}
		if err := answer(ctx, conn); err != nil {
			conn.CloseNow()
			return false, err
		}
		c = conn
		return true, nil
	})
	defer c.CloseNow()
	if err := g.e.Kube.CoreV1().Secrets(g.ns).Delete(context.Background(), "e2e-keys-revoke", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every replica has dropped the key once a plain request with it is refused by each.
	Eventually(t, 30*time.Second, "every gateway replica refuses the revoked key", func() (bool, error) {
		for _, ip := range g.replicaIPs(t) {
			req, _ := http.NewRequest("GET", "http://"+net.JoinHostPort(ip, "8080")+"/v1/models", nil)
			req.Header.Set("Authorization", "Bearer "+gweKeyRevoke)
			resp, err := g.hc.Do(req)
			if err != nil {
				return false, err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				return false, fmt.Errorf("replica %s answers %d", ip, resp.StatusCode)
			}
		}
		return true, nil
	})
	err := answer(ctx, c)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("request on a socket whose key was revoked: %v (close status %v), want close 1008", err, websocket.CloseStatus(err))
	}
}
