package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/modelcreds"
	"github.com/neuronetes/neuronetes/internal/testreq"
	"github.com/neuronetes/neuronetes/nodeagent/agent"
	"github.com/neuronetes/neuronetes/nodeagent/nodeapi"
)

var modelGVR = schema.GroupVersionResource{Group: "neuronetes.io", Version: "v1alpha1", Resource: "models"}

// nodeAgentEnv is one node agent running as a pod on the real node, watching only its namespace, with
// its cache and socket under a host directory private to the test.
type nodeAgentEnv struct {
	e        *Env
	ns       string
	cacheDir string // same path on the host and in the agent container
	socket   string
}

// startNodeAgent installs the CRDs (shared, left in place), builds the image and runs the agent pod
// with extraArgs added to its flags. Cleanup deletes the pod, waits for it to go, removes the warm
// labels the test caused and the host directory.
func startNodeAgent(t *testing.T, e *Env, warmDigests *[]string, extraArgs ...string) *nodeAgentEnv {
	t.Helper()
	e.Kubectl(t, "apply", "--server-side", "--force-conflicts", "-f", filepath.Join(e.Root, "deploy", "crds"))
	Eventually(t, 30*time.Second, "Model CRD served", func() (bool, error) {
		_, err := e.Dynamic.Resource(modelGVR).List(context.Background(), metav1.ListOptions{Limit: 1})
		return err == nil, err
	})
	img := e.Image(t, "nodeagent", "./cmd/nodeagent")
	ns := e.NamespaceWithPodSecurity(t, "nodeagent", "privileged",
		"the standalone node agent pod is privileged on the host network with hostPath cache directories")
	hostDir := filepath.Join("/var/lib/neuronetes/e2e", ns)
	na := &nodeAgentEnv{e: e, ns: ns, cacheDir: filepath.Join(hostDir, "models"), socket: filepath.Join(hostDir, "api.sock")}
	if err := os.MkdirAll(na.cacheDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the pod (applied below) has been deleted.
	t.Cleanup(func() {
		ctx := context.Background()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := e.Kube.CoreV1().Pods(ns).Get(ctx, "nodeagent", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		labels := map[string]any{}
		for _, d := range *warmDigests {
			labels[v1alpha1.WarmNodeLabel(d)] = nil
		}
		if len(labels) > 0 {
			body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
			if _, err := e.Kube.CoreV1().Nodes().Patch(ctx, e.NodeName, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
				t.Logf("cleanup: removing warm labels: %v", err)
			}
		}
		_ = os.RemoveAll(hostDir)
	})
	// The controller's Model source credentials endpoint (controller/modelcreds Server), served by
	// this process on the host's loopback (the agent pod is on the host network) for the agent's
	// ServiceAccount, from copies in ns.
	credsAddr := serveModelSourceCredentials(t, e, ns, filepath.Join(hostDir, "certs"))
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: v1
kind: ServiceAccount
metadata:
  name: nodeagent
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-%[1]s
rules:
  - {apiGroups: ["neuronetes.io"], resources: ["models", "agentclasses"], verbs: ["get", "list", "watch"]}
  - {apiGroups: ["neuronetes.io"], resources: ["models/status"], verbs: ["get", "patch"]}
  - {apiGroups: [""], resources: ["pods"], verbs: ["get", "list", "watch"]}
  - {apiGroups: [""], resources: ["nodes"], verbs: ["get", "patch"]}
  - {apiGroups: [""], resources: ["events"], verbs: ["create", "patch"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-%[1]s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-%[1]s}
subjects:
  - {kind: ServiceAccount, name: nodeagent, namespace: %[1]s}
---
apiVersion: v1
kind: Pod
metadata:
  name: nodeagent
spec:
  nodeName: %[2]s
  serviceAccountName: nodeagent
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
    - name: nodeagent
      image: %[3]s
      imagePullPolicy: Never
      args: ["--cache-dir=%[4]s", "--socket=%[5]s", "--watch-namespace=%[1]s", "--resync=5s",
             "--model-source-url=https://%[7]s", "--model-source-ca-file=%[8]s",
             "--model-source-token-file=/var/run/secrets/neuronetes/model-sources/token",
             "--egress-allow-cidrs=127.0.0.0/8",
             "--metrics-bind-address=0", "--health-probe-bind-address=0", "-v=2"%[9]s]
      env:
        - {name: NODE_NAME, value: %[2]s}
      securityContext: {privileged: true}
      volumeMounts:
        - {name: host, mountPath: %[6]s}
        - {name: token, mountPath: /var/run/secrets/neuronetes/model-sources, readOnly: true}
  volumes:
    - {name: host, hostPath: {path: %[6]s, type: Directory}}
    - name: token
      projected: {sources: [{serviceAccountToken: {audience: neuronetes.io/model-sources, expirationSeconds: 3600, path: token}}]}
`, ns, e.NodeName, img, na.cacheDir, na.socket, hostDir, credsAddr, filepath.Join(hostDir, "certs", "ca.crt"), flowArgs(extraArgs)))
	t.Cleanup(func() { // runs before the pod is deleted
		if t.Failed() {
			logs, _ := e.KubectlErr("logs", "-n", ns, "nodeagent", "--tail=60")
			t.Logf("node agent logs:\n%s", logs)
		}
	})
	e.WaitPodRunning(t, ns, "nodeagent", 2*time.Minute)
	return na
}

// flowArgs renders args as further elements of a YAML flow list.
func flowArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		fmt.Fprintf(&b, ", %q", a)
	}
	return b.String()
}

// waitWarm waits until the node carries the warm label of digest and the Model's status has a Ready
// entry for the node, then checks the cached file on the host and the node API.
func (na *nodeAgentEnv) waitWarm(t *testing.T, model, digest string, size int64) {
	t.Helper()
	e, ctx := na.e, context.Background()
	label := v1alpha1.WarmNodeLabel(digest)
	Eventually(t, 2*time.Minute, "node label "+label+" and Model "+model+" Ready on the node", func() (bool, error) {
		n, err := e.Kube.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		u, err := e.Dynamic.Resource(modelGVR).Namespace(na.ns).Get(ctx, model, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		phase, msg := nodeEntry(u, e.NodeName)
		if n.Labels[label] != "true" || phase != "Ready" {
			return false, fmt.Errorf("label=%q status phase=%q message=%q", n.Labels[label], phase, msg)
		}
		return true, nil
	})
	hexd := strings.TrimPrefix(digest, "sha256:")
	f, err := os.Open(filepath.Join(na.cacheDir, "sha256", hexd))
	if err != nil {
		var listing []string
		_ = filepath.WalkDir(filepath.Dir(na.cacheDir), func(p string, _ os.DirEntry, _ error) error { listing = append(listing, p); return nil })
		t.Fatalf("cache entry on the host: %v (host directory holds %q)", err, listing)
	}
	defer f.Close()
	h := sha256.New()
	n, _ := f.WriteTo(h)
	if got := hex.EncodeToString(h.Sum(nil)); got != hexd || n != size {
		t.Fatalf("cache entry hashes to %s (%d bytes), want %s (%d bytes)", got, n, hexd, size)
	}
	st, err := nodeapi.NewClient(na.socket).Status(ctx)
	if err != nil {
		t.Fatalf("node API status: %v", err)
	}
	for _, s := range st.Entries {
		if s.Hex == hexd {
			if !s.Warm || s.ResidentBytes != size {
				t.Fatalf("node API reports %+v, want warm and %d bytes resident", s, size)
			}
			return
		}
	}
	t.Fatalf("node API status has no entry %s: %+v", hexd[:12], st)
}

func nodeEntry(u *unstructured.Unstructured, node string) (phase, msg string) {
	nodes, _, _ := unstructured.NestedSlice(u.Object, "status", "nodes")
	for _, x := range nodes {
		m, _ := x.(map[string]any)
		if m["nodeName"] == node {
			p, _ := m["phase"].(string)
			s, _ := m["message"].(string)
			return p, s
		}
	}
	return "", ""
}

func randomWeights(t *testing.T, size int) ([]byte, string) {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	s := sha256.Sum256(b)
	return b, "sha256:" + hex.EncodeToString(s[:])
}

// TestNodeAgentHTTPModelWarmsNodeAndServesPod: a Model served by a local HTTP server is cached,
// verified and warmed on the real node, the node is labelled, Model status reports Ready for the node,
// and a demo-agent pod placed by the warm label reads the weights at the Model's mount path.
func TestNodeAgentHTTPModelWarmsNodeAndServesPod(t *testing.T) {
	e := requireEnv(t)
	const size = 8 << 20
	data, digest := randomWeights(t, size)
	var warmDigests []string
	warmDigests = append(warmDigests, digest)
	na := startNodeAgent(t, e, &warmDigests)

	// The agent pod uses the host network, so a server on the host loopback reaches it.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "model.bin", time.Time{}, bytes.NewReader(data))
	}))
	defer srv.Close()
	e.Apply(t, na.ns, fmt.Sprintf(`
apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata:
  name: llama-http
spec:
  source: {uri: "%s/llama/model.bin"}
  digest: "%s"
  format: raw
  sizeBytes: %d
  mountPath: /models
`, srv.URL, digest, size))
	na.waitWarm(t, "llama-http", digest, size)

	// A demo agent placed by the warm label finds the weights at the Model's mount path.
	demo := e.Image(t, "demo-agent", "./cmd/demo-agent")
	m := &v1alpha1.Model{ObjectMeta: metav1.ObjectMeta{Name: "llama-http"}, Spec: v1alpha1.ModelSpec{Digest: digest, Format: "raw", MountPath: "/models"}}
	vol, mount, err := agent.WeightsVolume(na.cacheDir, m, "weights")
	if err != nil {
		t.Fatal(err)
	}
	e.Apply(t, na.ns, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: demo
spec:
  nodeSelector: {%q: "true"}
  terminationGracePeriodSeconds: 1
  containers:
    - name: agent
      image: %s
      imagePullPolicy: Never
      args: ["--weights=%s"]
      volumeMounts: [{name: weights, mountPath: %q, readOnly: true}]
  volumes:
    - {name: weights, hostPath: {path: %q, type: DirectoryOrCreate}}
`, v1alpha1.WarmNodeLabel(digest), demo, filepath.Join(mount.MountPath, agent.WeightsFileName(m.Spec.Format)), mount.MountPath, vol.HostPath.Path))
	e.WaitPodRunning(t, na.ns, "demo", 2*time.Minute)
	Eventually(t, 30*time.Second, "demo agent log of its weights", func() (bool, error) {
		logs, err := e.KubectlErr("logs", "-n", na.ns, "demo")
		loaded := strings.Contains(logs, `"Weights loaded"`) && strings.Contains(logs, fmt.Sprintf(" bytes=%d ", size))
		return loaded, fmt.Errorf("logs: %q (%v)", logs, err)
	})
	// While the pod runs, the entry is pinned (never evicted).
	Eventually(t, 30*time.Second, "entry pinned by the demo pod", func() (bool, error) {
		st, err := nodeapi.NewClient(na.socket).Status(context.Background())
		if err != nil {
			return false, err
		}
		for _, s := range st.Entries {
			if "sha256:"+s.Hex == digest {
				return s.Pinned, fmt.Errorf("entry %+v", s)
			}
		}
		return false, fmt.Errorf("no entry in %+v", st)
	})
}

// TestNodeAgentS3Model: the same flow from a real S3-compatible server (MinIO built from the module
// proxy by hack/test-deps.d/10-minio.sh), with credentials and endpoint from the Model's Secret as
// the controller copies them and serves them to the agent's projected token (controller/modelcreds,
// run here in the test process), for a Model a pod on the node uses.
func TestNodeAgentS3Model(t *testing.T) {
	e := requireEnv(t)
	bin := filepath.Join(e.Root, ".local", "bin", "minio")
	if _, err := os.Stat(bin); err != nil {
		testreq.Tool(t, "minio", "not built (%v): run hack/test-deps.d/10-minio.sh", err)
	}
	endpoint := startMinioE2E(t, bin, "127.0.0.1")
	const size = 6<<20 + 123
	data, digest := randomWeights(t, size)
	ctx := context.Background()
	mc, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4("nn-e2e", "nn-e2e-secret-key", "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.MakeBucket(ctx, "weights", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mc.PutObject(ctx, "weights", "mistral/model.gguf", bytes.NewReader(data), size, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	warmDigests := []string{digest}
	na := startNodeAgent(t, e, &warmDigests)
	e.Apply(t, na.ns, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata:
  name: s3-creds
stringData:
  accessKeyID: nn-e2e
  secretAccessKey: nn-e2e-secret-key
  endpoint: "http://%s"
---
apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata:
  name: mistral-s3
spec:
  source:
    uri: s3://weights/mistral/model.gguf
    secretRef: {name: s3-creds}
  digest: "%s"
  format: gguf
---
# A pod on the node that uses the Model: the controller answers the node agent for it only then.
apiVersion: v1
kind: Pod
metadata:
  name: weights-user
  annotations: {neuronetes.io/model: mistral-s3}
spec:
  nodeName: %s
  terminationGracePeriodSeconds: 1
  containers: [{name: c, image: neuronetes.local/never-pulled:dev, imagePullPolicy: Never}]
`, endpoint, digest, e.NodeName))
	// The controller's part (controller/modelcreds): copy the credentials it serves.
	copyModelSource(t, e, na.ns, "mistral-s3", na.ns)
	na.waitWarm(t, "mistral-s3", digest, size)
}

// startMinioE2E runs MinIO on host (127.0.0.1 is reachable by the host-network agent pod, the
// bridge address 10.88.0.1 by every pod) with a temp dir.
func startMinioE2E(t *testing.T, bin, host string) string {
	t.Helper()
	port := func() int {
		l, err := net.Listen("tcp", host+":0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	addr, console := fmt.Sprintf("%s:%d", host, port()), fmt.Sprintf("%s:%d", host, port())
	cmd := exec.Command(bin, "server", "--quiet", "--address", addr, "--console-address", console, t.TempDir())
	cmd.Env = append(os.Environ(), "MINIO_ROOT_USER=nn-e2e", "MINIO_ROOT_PASSWORD=nn-e2e-secret-key", "MINIO_BROWSER=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	Eventually(t, 30*time.Second, "minio ready", func() (bool, error) {
		resp, err := http.Get("http://" + addr + "/minio/health/ready")
		if err != nil {
			return false, fmt.Errorf("%v\n%s", err, out.String())
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("status %s", resp.Status)
	})
	return addr
}

// copyModelSource runs the controller's Model source reconciler once against the cluster for the
// Model ns/name, writing its copy into copyNS, and fails unless the copy was made.
func copyModelSource(t *testing.T, e *Env, ns, name, copyNS string) {
	t.Helper()
	crlog.SetLogger(klog.NewKlogr()) // the reconciler logs through klog, controller-runtime's client through this
	c := crClient(t, e.Config)
	r := &modelcreds.Reconciler{Client: c, Secrets: c, Namespace: copyNS}
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}); err != nil {
		t.Fatalf("copying the source credentials of Model %s/%s: %v", ns, name, err)
	}
	if _, err := e.Kube.CoreV1().Secrets(copyNS).Get(context.Background(), v1alpha1.ModelSourceSecretName(ns, name), metav1.GetOptions{}); err != nil {
		t.Fatalf("no copy of Model %s/%s's credentials: %v", ns, name, err)
	}
}
