package e2e

// Attack tests of issue 26 items 2 and 10 (docs/nodeagent.md, "Model sources"): a user of a fresh
// namespace names Model sources that would read the node agent's files or reach internal
// addresses. The node agent runs as in nodeagent_test.go (privileged, host network) with no
// --file-source-roots and the harness's egress allowlist of loopback only, so link-local and
// private addresses keep the default denial. Each test checks the refusal in Model status, that
// the status carries no hash of the content, and that nothing entered the cache.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// dummyDigest is a well-formed digest of its own for each Model (the agent keeps one state per
// digest), which no content the test fetches hashes to.
func dummyDigest(name string) string {
	h := sha256.Sum256([]byte("neuronetes-attack-" + name))
	return "sha256:" + hex.EncodeToString(h[:])
}

// hexRun finds hash-like hex runs in a status message.
var hexRun = regexp.MustCompile(`[0-9a-f]{16,}`)

// applyAttackModel applies Model name with source uri and the dummy digest and waits for this
// node's entry to fail; it returns the entry's message.
func (na *nodeAgentEnv) applyAttackModel(t *testing.T, name, uri string) string {
	t.Helper()
	e := na.e
	e.Apply(t, na.ns, fmt.Sprintf(`
apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata:
  name: %s
spec:
  source: {uri: %q}
  digest: %q
  format: raw
  mountPath: /models
`, name, uri, dummyDigest(name)))
	var msg string
	Eventually(t, 45*time.Second, "Model "+name+" Failed on the node", func() (bool, error) {
		u, err := e.Dynamic.Resource(modelGVR).Namespace(na.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		var phase string
		phase, msg = nodeEntry(u, e.NodeName)
		return phase == "Failed", fmt.Errorf("phase %q message %q", phase, msg)
	})
	return msg
}

// assertNothingLeaked fails when Model name's msg carries a hex run other than its dummy
// digest's or the cache holds an entry.
func (na *nodeAgentEnv) assertNothingLeaked(t *testing.T, name, msg string) {
	t.Helper()
	want := strings.TrimPrefix(dummyDigest(name), "sha256:")
	for _, h := range hexRun.FindAllString(msg, -1) {
		if !strings.Contains(want, h) {
			t.Errorf("status message %q carries the hex run %s (a content hash?)", msg, h)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(na.cacheDir, "sha256"))
	if len(entries) > 0 {
		t.Errorf("the cache holds %d entries after a refused source", len(entries))
	}
}

// TestAttackModelFileSourceReadsHostFile: a Model naming a file of the node agent's filesystem
// (issue 26: file:///etc/hostname with a dummy digest got the file's hash into status) is refused
// before anything is read, with an error naming spec.source.uri and the admin setting.
func TestAttackModelFileSourceReadsHostFile(t *testing.T) {
	e := requireEnv(t)
	na := startNodeAgent(t, e, &[]string{})
	for name, uri := range map[string]string{"hostname": "file:///etc/hostname", "sa-token": "file:///var/run/secrets/kubernetes.io/serviceaccount/token"} {
		msg := na.applyAttackModel(t, name, uri)
		if !strings.Contains(msg, "spec.source.uri") || !strings.Contains(msg, "file sources are disabled") || !strings.Contains(msg, "nodeagent.fileSourceRoots") {
			t.Errorf("Model %s: status %q, want the refusal of file sources naming spec.source.uri and nodeagent.fileSourceRoots", name, msg)
		}
		na.assertNothingLeaked(t, name, msg)
	}
}

// TestAttackModelSourceLinkLocal: Model sources on the cloud metadata address, a private address,
// and a redirect from an admitted server to the metadata address are refused by the egress policy.
func TestAttackModelSourceLinkLocal(t *testing.T) {
	e := requireEnv(t)
	na := startNodeAgent(t, e, &[]string{})
	// The agent uses the host network and the harness admits loopback: this server is reachable,
	// its redirect target is not.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/iam/security-credentials/", http.StatusFound)
	}))
	defer srv.Close()
	for _, tc := range []struct{ name, uri, want string }{
		{"metadata", "http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"},
		{"private", "http://10.0.0.1:8080/weights.bin", "10.0.0.1 is a private address"},
		{"redirect-to-metadata", srv.URL + "/weights.bin", "169.254.169.254 is a link-local address"},
	} {
		msg := na.applyAttackModel(t, tc.name, tc.uri)
		if !strings.Contains(msg, "egress denied") || !strings.Contains(msg, tc.want) {
			t.Errorf("Model %s: status %q, want an egress denial (%s)", tc.name, msg, tc.want)
		}
		na.assertNothingLeaked(t, tc.name, msg)
	}
}
