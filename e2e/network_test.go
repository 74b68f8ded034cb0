package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/e2e/cluster"
)

// netResult is one JSON line of e2e/cmd/netcheck.
type netResult struct {
	Check string   `json:"check"`
	Input string   `json:"input"`
	Addrs []string `json:"addrs"`
	Code  int      `json:"code"`
	Body  string   `json:"body"`
	Pods  []string `json:"pods"`
	Host  string   `json:"host"`
	Error string   `json:"error"`
}

// runNetcheck runs netcheck with args in a pod without host network, waits
// for it to finish and returns its result lines.
func runNetcheck(t *testing.T, e *Env, ns, name, img string, args ...string) []netResult {
	t.Helper()
	return runNetcheckLabelled(t, e, ns, name, img, "", args...)
}

// runNetcheckLabelled is runNetcheck in a pod with labels (the content of a
// YAML flow map, "" for none), for checks that a NetworkPolicy peer decides.
// The pod meets Pod Security restricted (non-root, no capabilities), so it
// runs in the agent namespaces too.
func runNetcheckLabelled(t *testing.T, e *Env, ns, name, img, labels string, args ...string) []netResult {
	t.Helper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels: {%s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: netcheck
    image: %s
    imagePullPolicy: Never
    command: ["/netcheck"]
    args: [%s]
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, name, labels, img, strings.Join(quoted, ", ")))
	ctx := context.Background()
	Eventually(t, 2*time.Minute, "pod "+name+" finished", func() (bool, error) {
		p, err := e.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		done := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
		return done, fmt.Errorf("phase %s %s", p.Status.Phase, podWaitingReason(p))
	})
	raw, err := e.Kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs of %s: %v", name, err)
	}
	var out []netResult
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	for sc.Scan() {
		var r netResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s printed a line that is not a result: %q (%v)", name, sc.Text(), err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		t.Fatalf("%s printed no result; logs:\n%s", name, raw)
	}
	return out
}

// TestServiceDNSAndClusterIP: a pod resolves a Service by its short, namespaced
// and fully qualified names through CoreDNS, gets the ClusterIP, and an HTTP
// round trip through that ClusterIP reaches the backend pod (kube-proxy). The
// host reaches the same ClusterIP and resolves the name at the cluster DNS.
func TestServiceDNSAndClusterIP(t *testing.T) {
	e := requireEnv(t)
	ns := e.Namespace(t, "net")
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	e.Apply(t, ns, fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata:
  name: echo
  labels: {app: echo}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: echo
    image: %s
    imagePullPolicy: Never
    command: ["/netcheck", "serve", "-addr", ":8080"]
    env: [{name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
    readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata:
  name: echo
spec:
  selector: {app: echo}
  ports: [{name: http, port: 80, targetPort: 8080}]
`, img))
	e.WaitPodRunning(t, ns, "echo", 2*time.Minute)
	svc, err := e.Kube.CoreV1().Services(ns).Get(context.Background(), "echo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := svc.Spec.ClusterIP
	fqdn := "echo." + ns + ".svc." + cluster.ClusterDomain
	results := runNetcheck(t, e, ns, "probe", img,
		"probe", "-name", "echo", "-name", "echo."+ns, "-name", fqdn,
		"-url", "http://echo/", "-url", "http://"+fqdn+"/")
	if len(results) != 5 {
		t.Fatalf("probe printed %d results, want 5: %+v", len(results), results)
	}
	for _, r := range results {
		switch {
		case r.Error != "":
			t.Errorf("%s %s: %s", r.Check, r.Input, r.Error)
		case r.Check == "resolve" && (len(r.Addrs) != 1 || r.Addrs[0] != ip):
			t.Errorf("%s resolved to %v in the pod, want the ClusterIP %s", r.Input, r.Addrs, ip)
		case r.Check == "get" && (r.Code != http.StatusOK || r.Body != "hello from echo"):
			t.Errorf("GET %s from the pod: %d %q, want 200 \"hello from echo\"", r.Input, r.Code, r.Body)
		}
	}
	// From the host: the ClusterIP (kube-proxy's output rules) and the name
	// at the cluster DNS on the bridge address.
	Eventually(t, 30*time.Second, "GET http://"+ip+"/ from the host", func() (bool, error) {
		body, err := httpGet("http://" + net.JoinHostPort(ip, "80") + "/")
		return body == "hello from echo", fmt.Errorf("body %q: %v", body, err)
	})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(cluster.NodeIP, "53"))
	}}
	addrs, err := r.LookupHost(context.Background(), fqdn)
	if err != nil || len(addrs) != 1 || addrs[0] != ip {
		t.Errorf("the host's lookup of %s at %s:53 = %v, %v; want [%s]", fqdn, cluster.NodeIP, addrs, err, ip)
	}
}

func httpGet(url string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}

// TestInClusterConfigWithoutHostNetwork: a pod on the pod network, with no
// env override, lists pods through rest.InClusterConfig: its ServiceAccount
// token and the kubernetes Service (10.96.0.1:443, served by kube-proxy in
// front of the apiserver on the bridge address).
func TestInClusterConfigWithoutHostNetwork(t *testing.T) {
	e := requireEnv(t)
	ns := e.Namespace(t, "incluster")
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	e.Apply(t, ns, `
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: pod-reader
rules:
- {apiGroups: [""], resources: ["pods"], verbs: ["list"]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: pod-reader
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}
subjects:
- {kind: ServiceAccount, name: default}
`)
	results := runNetcheck(t, e, ns, "lister", img, "list-pods")
	pod, err := e.Kube.CoreV1().Pods(ns).Get(context.Background(), "lister", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.HostNetwork {
		t.Fatal("the lister pod runs on the host network")
	}
	r := results[0]
	if r.Error != "" {
		t.Fatalf("in-cluster list of pods in %s via %s: %s", r.Input, r.Host, r.Error)
	}
	if want := cluster.KubernetesServiceIP + ":443"; r.Host != want {
		t.Errorf("the pod reached the apiserver at %s, want the kubernetes Service %s", r.Host, want)
	}
	if r.Input != ns || !containsString(r.Pods, "lister") {
		t.Errorf("listed pods %v in namespace %q, want the lister pod in %s", r.Pods, r.Input, ns)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// clusterAdded matches an addition to the host's network: an nftables table
// or chain (its family, table name and chain) or a route on the bridge.
var clusterAdded = regexp.MustCompile(`^(nftables (?:table|chain) "(\S+) (\S+)(?: [^"]+)?"|route "[0-9./]+ dev nn0 [^"]*") \(not there before cluster-up\)$`)

// clusterOwned reports whether a host change is one the running cluster may
// make: a table or chain of a table cluster.IsClusterTable names
// (kube-proxy's, the NetworkPolicy enforcer's), or a bridge or Service route.
// Anything else would stay behind after cluster-down.
func clusterOwned(change string) bool {
	m := clusterAdded.FindStringSubmatch(change)
	return m != nil && (m[2] == "" || cluster.IsClusterTable(m[2], m[3]))
}

// TestHostChangesAreTheClustersOwn: the host state recorded before
// cluster-up is there, the running cluster has added kube-proxy's nftables
// table and the Service route to it, and nothing else that cluster-down
// would not remove. (cluster-down compares the host with the same record
// and fails when anything differs; the suite runs it when it started the
// cluster.)
func TestHostChangesAreTheClustersOwn(t *testing.T) {
	e := requireEnv(t)
	changes, err := cluster.HostChanges(e.Root)
	if err != nil {
		t.Fatal(err)
	}
	var sawTable, sawRoute bool
	for _, c := range changes {
		if !clusterOwned(c) {
			t.Errorf("the running cluster changed the host outside what cluster-down restores: %s", c)
		}
		sawTable = sawTable || strings.HasPrefix(c, `nftables table "ip kube-proxy"`)
		sawRoute = sawRoute || strings.HasPrefix(c, `route "`+cluster.ServiceCIDR+" dev nn0")
	}
	if !sawTable || !sawRoute {
		t.Errorf("changes %q lack kube-proxy's table (%v) or the Service route (%v)", changes, sawTable, sawRoute)
	}
}
