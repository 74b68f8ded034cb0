package e2e

// Attack on the shared Redis (docs/security.md, "Redis"): a pod of a second tenant's namespace
// tries the victim namespace's session keys with no credentials and with its own namespace's
// sidecar user (which the controller created with store.ACLRules), and tries FLUSHALL, KEYS and
// CONFIG. Every attempt is refused and the victim's session is unchanged.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/controller/redisusers"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

// redisTenant is an AgentClass "mem" whose sidecars use the Redis at %[1]s, and an AgentPool of
// it with no replicas: the pool makes the controller manage the namespace's Redis user.
const redisTenant = `apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: mem}
spec:
  sidecar: {redisAddr: "%[1]s", keysSecretName: sidecar-keys}
  template:
    spec:
      containers:
      - name: agent
        image: %[2]s
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: mem}
spec:
  agentClassRef: {name: mem}
  minReplicas: 0
  maxReplicas: 1
  replicas: 0
`

// redisAttackerPod runs redis-attacker with its namespace's managed sidecar credentials.
const redisAttackerPod = `apiVersion: v1
kind: Pod
metadata: {name: redis-attacker}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: attacker
    image: %[1]s
    imagePullPolicy: Never
    args: ["-addr=%[2]s", "-victim-key=%[3]s", "-own-key=%[4]s"]
    env:
    - {name: NEURONETES_REDIS_USERNAME, valueFrom: {secretKeyRef: {name: %[5]s, key: username}}}
    - {name: NEURONETES_REDIS_PASSWORD, valueFrom: {secretKeyRef: {name: %[5]s, key: password}}}
`

// aclRedis starts a redis-server on the cluster bridge whose default user is off, with the
// controller's user (password in the returned file) and an admin for the test.
func aclRedis(t *testing.T) (*redistest.Server, string, *redis.Client) {
	t.Helper()
	sidecarRedis(t) // skips without the bridge
	args := append([]string{"--user", redisusers.DefaultUser, "on", ">ctl-e2e-password"}, redisusers.ACLRules()...)
	args = append(args, "--user", "admin", "on", ">adm", "~*", "&*", "+@all", "--user", "default", "off")
	rs := redistest.Start(t, redistest.Options{Bind: "10.88.0.1", Args: args})
	pw := filepath.Join(t.TempDir(), "redis-password")
	if err := os.WriteFile(pw, []byte("ctl-e2e-password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "admin", Password: "adm"})
	t.Cleanup(func() { admin.Close() })
	return rs, pw, admin
}

// sessionTurns reads a conversation through the sidecar of the pod at ip.
func sessionTurns(t *testing.T, ip, conv string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + net.JoinHostPort(ip, "7070") + "/v1/sessions/" + conv)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("session %s through the victim's sidecar: %d %s", conv, resp.StatusCode, b)
	}
	return string(b)
}

// redisDump DUMPs every key of namespace ns.
func redisDump(t *testing.T, admin *redis.Client, ns string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := admin.Keys(ctx, "nn:{"+ns+"}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		out[k] = admin.Dump(ctx, k).Val()
	}
	return out
}

// TestAttackRedisForeignNamespaceKeys: two namespaces get their Redis users from controllers with
// --sidecar-redis-users; the victim's injected sidecar keeps a conversation with its user. A pod
// of the attacker's namespace, with no credentials, gets NOAUTH for everything; with its own
// namespace's sidecar credentials (which work on its own keys) it gets NOPERM reading the
// victim's session (with HMGET, a command its user may send, and HGETALL, one it may not),
// forging or deleting it, and on FLUSHALL, KEYS and CONFIG. The victim's keys are byte-for-byte
// unchanged and its sidecar still serves the conversation.
func TestAttackRedisForeignNamespaceKeys(t *testing.T) {
	e := requireEnv(t)
	rs, pwFile, admin := aclRedis(t)
	ctrlInstallCRDs(t, e)
	sidecarImg := e.Image(t, "sidecar", "./cmd/sidecar")
	agentImg := e.Image(t, "demo-agent", "./cmd/demo-agent")
	attackerImg := e.Image(t, "redis-attacker", "./e2e/cmd/redis-attacker")
	victim, attacker := e.Namespace(t, "atk-redis-victim"), e.Namespace(t, "atk-redis-attacker")
	const secret = "neuronetes-sidecar-redis"
	for _, ns := range []string{victim, attacker} {
		sidecarKeys(t, e, ns)
		startController(t, e, ns, sidecarImg, "--http-addr=0.0.0.0:7070", "--sidecar-redis-users",
			"--sidecar-redis-addr="+rs.Addr, "--redis-username="+redisusers.DefaultUser, "--redis-password-file="+pwFile)
		e.Apply(t, ns, fmt.Sprintf(redisTenant, rs.Addr, agentImg))
	}
	e.Apply(t, victim, fmt.Sprintf(sidecarInjectedPod, "victim", agentImg, ""))
	ip := e.WaitPodRunning(t, victim, "victim", 3*time.Minute).Status.PodIP
	const conv = "conv-redis-victim"
	Eventually(t, time.Minute, "a turn through the victim's agent and sidecar", func() (bool, error) {
		body, _ := json.Marshal(map[string]any{"model": "demo-model", "max_tokens": 4,
			"messages": []map[string]string{{"role": "user", "content": "the victim's secret turn"}}})
		req, _ := http.NewRequest("POST", "http://"+net.JoinHostPort(ip, "8000")+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("X-Conversation-ID", conv)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == 200, fmt.Errorf("%d %s", resp.StatusCode, b)
	})
	before := sessionTurns(t, ip, conv)
	keys := redisDump(t, admin, victim)
	var victimKey string
	for k := range keys {
		if admin.Type(context.Background(), k).Val() == "hash" {
			victimKey = k
		}
	}
	if victimKey == "" {
		t.Fatalf("no session hash of %s in Redis (keys %v)", victim, slices.Collect(maps.Keys(keys)))
	}

	e.Apply(t, attacker, fmt.Sprintf(redisAttackerPod, attackerImg, rs.Addr, victimKey, "nn:{"+attacker+"}:own", secret))
	Eventually(t, 3*time.Minute, "the attacker pod to finish", func() (bool, error) {
		p, err := e.Kube.CoreV1().Pods(attacker).Get(context.Background(), "redis-attacker", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, fmt.Errorf("phase %s", p.Status.Phase)
	})
	logs := e.Kubectl(t, "logs", "-n", attacker, "redis-attacker")
	var n int
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var r struct {
			As    string
			Cmd   []any
			Reply string
			Err   string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("attacker output %q: %v", line, err)
		}
		n++
		own := r.As == "own-user" && r.Cmd[0] == "SET"
		want := map[string]string{"anonymous": "NOAUTH", "own-user": "NOPERM"}[r.As]
		switch {
		case own && r.Err != "":
			t.Errorf("the attacker's own sidecar user on its own key: %s (the credentials must work for the attack to mean anything)", r.Err)
		case !own && !strings.Contains(r.Err, want):
			t.Errorf("%s %v = %q %q, want %s", r.As, r.Cmd, r.Reply, r.Err, want)
		case !own:
			t.Logf("[e2e] %s %v refused: %s", r.As, r.Cmd, r.Err)
		}
	}
	if n != 15 {
		t.Fatalf("attacker printed %d results, want 15:\n%s", n, logs)
	}
	if after := redisDump(t, admin, victim); !maps.Equal(after, keys) {
		t.Errorf("the victim's Redis keys changed under the attack")
	}
	if after := sessionTurns(t, ip, conv); after != before {
		t.Errorf("the victim's session changed: %s, was %s", after, before)
	}
}
