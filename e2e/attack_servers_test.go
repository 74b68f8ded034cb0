package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
