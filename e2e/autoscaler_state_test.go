package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAutoscalerStateSurvivesRestart: a pool scaled up on NATS lag, with a 10-minute scale-down
// stabilization window, keeps its count after the controller is killed and started again on an
// empty queue: the new process restores the decision history from the pool's state ConfigMap
// (checked: version and checksum keys, owned by the pool) and holds the scale-down, instead of
// dropping to the minimum at its first evaluation as a controller with history in memory only
// does. A kubectl scale made while the controller is down is recognised as a manual scale.
func TestAutoscalerStateSurvivesRestart(t *testing.T) {
	e := requireEnv(t)
	ctrlInstallCRDs(t, e)
	ns := e.Namespace(t, "as-state")
	ctx := context.Background()
	s, js, stream := taskQueue(t)
	asArgs, _, _, _ := asControllerArgs(t, e, ns, s.ClientURL())
	ctl := startController(t, e, ns, "neuronetes.local/sidecar:dev", "", append(asArgs, "--webhook=false")...)
	// asLagYAML's pool with a 10-minute scale-down window and room above the lag's 3 replicas.
	pool := strings.Replace(asLagYAML, "  autoscaling: {}", "  autoscaling:\n    behavior: {scaleDown: {stabilizationWindow: 10m}}", 1)
	e.Apply(t, ns, strings.Replace(pool, "  maxReplicas: 3\n", "  maxReplicas: 6\n", 1))
	for i := range 25 {
		if _, err := js.Publish(ctx, "tasks", fmt.Appendf(nil, "task-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	logs := procLogs(ctl)
	waitPool(t, e, ns, "workers", logs, 30*time.Second, "scaled to 3 on lag 25", func() (bool, error) {
		return asReplicas(t, e, ns, "workers") == 3, fmt.Errorf("spec.replicas %d", asReplicas(t, e, ns, "workers"))
	})
	waitPool(t, e, ns, "workers", logs, 30*time.Second, "the state ConfigMap", func() (bool, error) {
		cm, err := e.Kube.CoreV1().ConfigMaps(ns).Get(ctx, "autoscaler-state.workers", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ok := cm.Data["version"] == "1" && strings.HasPrefix(cm.Data["checksum"], "sha256:") && len(cm.BinaryData["state.json.zst"]) > 0 &&
			len(cm.OwnerReferences) == 1 && cm.OwnerReferences[0].Kind == "AgentPool"
		return ok, fmt.Errorf("configmap data %v, owners %v", cm.Data, cm.OwnerReferences)
	})
	time.Sleep(4 * time.Second) // one more evaluation at 3 is recorded
	ctl.kill()
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	ctl.start()
	// Several evaluations (3 s period) on an empty queue: the restored window holds 3.
	time.Sleep(12 * time.Second)
	if n := asReplicas(t, e, ns, "workers"); n != 3 {
		t.Fatalf("after the restart on an empty queue: spec.replicas %d, want 3 held by the restored 10-minute window\n%s", n, poolDiagnosis(e, ns, "workers", logs))
	}
	b, _ := os.ReadFile(ctl.log.Name())
	if !strings.Contains(string(b), "Autoscaler state restored") {
		t.Errorf("the restarted controller did not log the restore\n%s", poolDiagnosis(e, ns, "workers", logs))
	}
	// A manual scale while the controller is down is re-decided at its restart.
	ctl.kill()
	e.Kubectl(t, "-n", ns, "scale", "agentpool/workers", "--replicas=5")
	ctl.start()
	waitManualScaleReplaced(t, e, ns, "workers", logs, 3, 30*time.Second, "the manual scale to 5 replaced by the decision")
	t.Logf("[e2e] autoscaler state restored after two restarts; the 10-minute window held 3 replicas on an empty queue")
}
