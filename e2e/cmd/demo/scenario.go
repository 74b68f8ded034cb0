package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/e2e/cluster"
	"github.com/neuronetes/neuronetes/e2e/images"
)

// deploy installs the Helm chart into the local cluster (make deploy-local)
// with the images built by the previous step.
func (d *demo) deploy(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, "bash", "hack/deploy-local.sh")
	cmd.Dir = d.root
	cmd.Env = append(os.Environ(), "SKIP_IMAGES=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/deploy-local.sh: %w", err)
	}
	return waitFor(ctx, 90*time.Second, "the driver's ResourceSlices", func() (bool, error) {
		l, err := d.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=gpu.neuronetes.io"})
		return err == nil && len(l.Items) > 0, err
	})
}

// recreatePod deletes a pod of the demo namespace (from an earlier run) and
// applies the manifest again.
func (d *demo) recreate(ctx context.Context, name, manifest string) error {
	_ = d.kube.CoreV1().Pods(demoNamespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	_ = d.kube.ResourceV1().ResourceClaims(demoNamespace).Delete(ctx, name, metav1.DeleteOptions{})
	if err := waitFor(ctx, 60*time.Second, "old "+name+" gone", func() (bool, error) {
		_, err1 := d.kube.CoreV1().Pods(demoNamespace).Get(ctx, name, metav1.GetOptions{})
		_, err2 := d.kube.ResourceV1().ResourceClaims(demoNamespace).Get(ctx, name, metav1.GetOptions{})
		return err1 != nil && err2 != nil, nil
	}); err != nil {
		return err
	}
	return d.apply(ctx, demoNamespace, manifest)
}

// gpuPod runs a pod that claims one device of class through DRA and reports
// the NVIDIA_VISIBLE_DEVICES its container received through CDI.
func (d *demo) gpuPod(name, class string) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := d.ensureNamespace(ctx, demoNamespace); err != nil {
			return err
		}
		if err := d.recreate(ctx, name, fmt.Sprintf(`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: %[1]s
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: %[2]s
---
apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
spec:
  terminationGracePeriodSeconds: 1
  resourceClaims:
  - name: gpu
    resourceClaimName: %[1]s
  containers:
  - name: app
    image: %[3]s
    imagePullPolicy: Never
    securityContext: %[4]s
    resources:
      claims:
      - name: gpu
`, name, class, images.Ref("smoke"), images.RestrictedSecurityContext)); err != nil {
			return err
		}
		if err := d.waitPodRunning(ctx, demoNamespace, name, 120*time.Second); err != nil {
			return err
		}
		var env string
		if err := waitFor(ctx, 20*time.Second, name+" logs", func() (bool, error) {
			b, err := d.kube.CoreV1().Pods(demoNamespace).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "NVIDIA_VISIBLE_DEVICES=") {
					env = l
				}
			}
			return env != "", err
		}); err != nil {
			return err
		}
		claim, err := d.kube.ResourceV1().ResourceClaims(demoNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		dev := "?"
		if a := claim.Status.Allocation; a != nil && len(a.Devices.Results) > 0 {
			dev = a.Devices.Results[0].Device
		}
		d.results = append(d.results, fmt.Sprintf("%s (class %s) got device %s; its container sees %s", name, class, dev, env))
		return nil
	}
}

// serveWeights serves a generated weights file to the node agent from the
// cluster bridge address and returns its URL and digest. The bytes are
// seeded, so a second make run finds them in the node's cache.
func serveWeights(ctx context.Context, size int) (string, string, error) {
	data := make([]byte, size)
	seeded := mrand.NewChaCha8([32]byte{'n', 'e', 'u', 'r', 'o', 'n', 'e', 't', 'e', 's'})
	_, _ = seeded.Read(data)
	sum := sha256.Sum256(data)
	// A stable port keeps the URL of a Model left by an earlier run valid, so
	// the node agent's retry of it succeeds.
	l, err := net.Listen("tcp", net.JoinHostPort(cluster.NodeIP, weightsPort))
	if err != nil {
		if l, err = net.Listen("tcp", net.JoinHostPort(cluster.NodeIP, "0")); err != nil {
			return "", "", fmt.Errorf("listening on the cluster bridge: %w", err)
		}
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "weights.bin", time.Unix(0, 0), bytes.NewReader(data))
	})}
	go func() { _ = srv.Serve(l) }()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	return "http://" + l.Addr().String() + "/weights.bin", "sha256:" + hex.EncodeToString(sum[:]), nil
}

// weightsPort is where the demo serves its model weights on the bridge.
const weightsPort = "18089"

// startWeightsServer serves the demo model before anything is deployed, so
// a node agent that starts with a Model from an earlier run finds it.
func (d *demo) startWeightsServer(ctx context.Context) error {
	var err error
	d.weightsURL, d.weightsDigest, err = serveWeights(ctx, 32<<20)
	return err
}

// warmModel creates a Model and waits for the node agent to cache it and
// label the node.
func (d *demo) warmModel(ctx context.Context) error {
	url, digest := d.weightsURL, d.weightsDigest
	start := time.Now()
	if err := d.apply(ctx, demoNamespace, fmt.Sprintf(`
apiVersion: neuronetes.io/v1alpha1
kind: Model
metadata:
  name: demo-weights
spec:
  source:
    uri: %s
  digest: %s
  format: safetensors
  sizeBytes: %d
  mountPath: /models
`, url, digest, 32<<20)); err != nil {
		return err
	}
	label := v1alpha1.WarmNodeLabel(digest)
	if err := waitFor(ctx, 120*time.Second, "node label "+label, func() (bool, error) {
		n, err := d.kube.CoreV1().Nodes().Get(ctx, cluster.NodeName, metav1.GetOptions{})
		return err == nil && n.Labels[label] == "true", err
	}); err != nil {
		return err
	}
	d.results = append(d.results, fmt.Sprintf("Model demo-weights (32 MiB, %s…) cached, verified and page-cache warm on %s in %s; node label %s=true",
		digest[:19], cluster.NodeName, time.Since(start).Round(100*time.Millisecond), label))
	return nil
}

var agentPoolGVR = schema.GroupVersionResource{Group: "neuronetes.io", Version: "v1alpha1", Resource: "agentpools"}

// poolPods lists the demo pool's pods by state label.
func (d *demo) poolPods(ctx context.Context) (map[string][]corev1.Pod, error) {
	l, err := d.kube.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "neuronetes.io/pool=demo"})
	if err != nil {
		return nil, err
	}
	out := map[string][]corev1.Pod{}
	for _, p := range l.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		ready := false
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if ready {
			out[p.Labels["neuronetes.io/state"]] = append(out[p.Labels["neuronetes.io/state"]], p)
		}
	}
	return out, nil
}

// agentPool deploys the demo pool (2 serving, 2 warm), scales it to 4 and
// measures how fast the warm pods serve, then has a conversation across two
// replicas through their sidecars.
func (d *demo) agentPool(ctx context.Context) error {
	if err := d.dropStalePool(ctx); err != nil {
		return err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := d.apply(ctx, demoNamespace, fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata:
  name: demo-sidecar-keys
stringData:
  active: k1
  k1: %s
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata:
  name: demo
spec:
  slo: {ttft: 500ms, tokensPerSecond: 50}
  costPerReplicaHour: 1.5
  sidecar:
    redisAddr: redis.neuronetes-system.svc.cluster.local:6379
    keysSecretName: demo-sidecar-keys
  template:
    spec:
      terminationGracePeriodSeconds: 2
      containers:
      - name: agent
        image: %s
        imagePullPolicy: Never
        args: ["--listen=:8000", "--token-rate=200", "--ttft-base=20ms"]
        ports:
        - containerPort: 8000
        readinessProbe:
          httpGet: {path: /readyz, port: 8000}
          periodSeconds: 1
        securityContext: %s
---
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: demo
spec:
  agentClassRef: {name: demo}
  replicas: 2
  minReplicas: 2
  maxReplicas: 10
  prewarmPercent: 20
  drainGracePeriodSeconds: 5
  autoscaling:
    useWarmPool: true
    replenishStrategy: {delay: 20s, batchSize: 1}
    metrics:
    - type: ttft-p95
      target: "500ms"
      averagingWindow: 1m
`, base64.StdEncoding.EncodeToString(key), images.Ref("demo-agent"), images.RestrictedSecurityContext)); err != nil {
		return err
	}
	// A pool left at 4 by an earlier run first drains back to 2.
	var before map[string][]corev1.Pod
	if err := waitFor(ctx, 180*time.Second, "2 serving and 2 warm demo pods Ready", func() (bool, error) {
		pods, err := d.poolPods(ctx)
		before = pods
		return err == nil && len(pods["serving"]) == 2 && len(pods["warm"]) == 2 && len(pods["draining"]) == 0,
			fmt.Errorf("pods by state: serving %d warm %d draining %d (%v)", len(pods["serving"]), len(pods["warm"]), len(pods["draining"]), err)
	}); err != nil {
		return err
	}
	{
		start := time.Now()
		// The pool is autoscaled and the autoscaler owns spec.replicas: scale it by its floor.
		patch := []byte(`{"spec":{"minReplicas":4}}`)
		if _, err := d.dyn.Resource(agentPoolGVR).Namespace(demoNamespace).Patch(ctx, "demo", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("scaling the pool to 4: %w", err)
		}
		warmNames := map[string]bool{}
		for _, p := range before["warm"] {
			warmNames[p.Name] = true
		}
		if err := waitFor(ctx, 60*time.Second, "4 serving pods", func() (bool, error) {
			pods, err := d.poolPods(ctx)
			return err == nil && len(pods["serving"]) >= 4, err
		}); err != nil {
			return err
		}
		took := time.Since(start)
		after, _ := d.poolPods(ctx)
		reused := 0
		for _, p := range after["serving"] {
			if warmNames[p.Name] {
				reused++
			}
		}
		d.results = append(d.results, fmt.Sprintf("AgentPool demo: 2 serving + 2 warm; scaled to 4 -> %d warm pods activated and serving in %s (no pod start)",
			reused, took.Round(10*time.Millisecond)))
	}
	return d.conversation(ctx)
}
