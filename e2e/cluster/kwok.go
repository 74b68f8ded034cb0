package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KwokVersion is the pinned kwok release whose stage files configure it.
const KwokVersion = "v0.8.0"

// KwokNodeName returns the name of the i-th kwok node.
func KwokNodeName(i int) string { return fmt.Sprintf("kwok-node-%d", i) }

// kwokStages concatenates kwok's "fast" node and pod stages and its lease
// heartbeat stage from its module source into one config file.
func kwokStages(p Paths) (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	base := filepath.Join(strings.TrimSpace(string(out)), "sigs.k8s.io", "kwok@"+KwokVersion, "kustomize", "stage")
	var files []string
	for _, kind := range []string{"node/fast", "node/heartbeat-with-lease", "pod/fast"} {
		m, _ := filepath.Glob(filepath.Join(base, kind, "*.yaml"))
		files = append(files, m...)
	}
	if len(files) == 0 {
		return "", fmt.Errorf("kwok stage files not found under %s (run `make tools` to download kwok %s)", base, KwokVersion)
	}
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		b.WriteString("---\n")
		b.Write(data)
		b.WriteString("\n")
	}
	if err := os.MkdirAll(p.Kwok, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(p.Kwok, "stages.yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func startKwok(ctx context.Context, p Paths, pk *pki, cs kubernetes.Interface, opts Options) error {
	if _, ok := runningPid(p, "kwok"); !ok {
		stages, err := kwokStages(p)
		if err != nil {
			return err
		}
		kc := filepath.Join(p.Local, "kubeconfigs", "kwok.kubeconfig")
		if err := writeKubeconfig(kc, pk, "kwok", apiServerURL()); err != nil {
			return err
		}
		if _, err := startProcess(p, "kwok", nil, p.Binary("kwok"),
			"--kubeconfig="+kc, "--config="+stages,
			"--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
			"--cidr=10.89.0.0/16", "--node-ip=10.89.0.1", "--node-lease-duration-seconds=40",
			"--server-address=127.0.0.1:"+strconv.Itoa(KwokPort)); err != nil {
			return err
		}
	}
	for i := 0; i < opts.KwokNodes; i++ {
		var extra map[string]string
		if opts.KwokNodeLabels != nil {
			extra = opts.KwokNodeLabels(i)
		}
		if err := createKwokNode(ctx, cs, KwokNodeName(i), extra); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(120 * time.Second)
	for i := 0; i < opts.KwokNodes; {
		if err := waitNodeReady(ctx, cs, p, KwokNodeName(i), time.Until(deadline)); err != nil {
			return fmt.Errorf("kwok node: %w; kwok log:\n%s", err, logTail(p, "kwok", 20))
		}
		i++
	}
	return nil
}

func createKwokNode(ctx context.Context, cs kubernetes.Interface, name string, extra map[string]string) error {
	labels := map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
	for k, v := range extra {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{KwokNodeAnnotation: "fake"}},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: KwokNodeAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}
	_, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating kwok node %s: %w", name, err)
	}
	return nil
}

func stopKwok(p Paths) { stopProcess(p, "kwok", 5*time.Second) }
