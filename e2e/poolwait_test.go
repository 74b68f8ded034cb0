package e2e

// Pool waits that explain themselves: on a timeout they print the pool's status and conditions,
// its recent Events and the controller's last log lines about it.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/e2e/kube"
)

// ctrlLogs returns the controller's log (whole or tail); the pool's lines are picked from it.
type ctrlLogs func() (string, error)

// procLogs reads a host-process controller's log file.
func procLogs(c *ctrlProc) ctrlLogs {
	return func() (string, error) {
		b, err := os.ReadFile(c.log.Name())
		return string(b), err
	}
}

// releaseLogs reads the logs of every controller pod of a chart release.
func releaseLogs(e *Env, releaseNS string) ctrlLogs {
	return func() (string, error) {
		return e.KubectlErr("logs", "-n", releaseNS, "-l", "app.kubernetes.io/component=controller",
			"--tail=4000", "--prefix", "--max-log-requests=10", "--all-containers")
	}
}

// waitPool polls cond like Eventually; on a timeout it fails the test with the pool's diagnosis.
func waitPool(t testing.TB, e *Env, ns, pool string, logs ctrlLogs, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	if err := kube.WaitFor(context.Background(), timeout, what, cond); err != nil {
		t.Fatalf("%v\n%s", err, poolDiagnosis(e, ns, pool, logs))
	}
}

// waitManualScaleReplaced waits until the autoscaler has replaced a spec.replicas written outside
// it: the pool is back at want replicas and has a ManualScaleOverridden Event, whose message it
// returns. On a timeout it fails the test with the pool's diagnosis.
func waitManualScaleReplaced(t *testing.T, e *Env, ns, pool string, logs ctrlLogs, want int64, timeout time.Duration, what string) string {
	t.Helper()
	var msg string
	waitPool(t, e, ns, pool, logs, timeout, what, func() (bool, error) {
		evs, err := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pool + ",reason=ManualScaleOverridden"})
		if err != nil {
			return false, err
		}
		if len(evs.Items) > 0 {
			msg = evs.Items[0].Message
		}
		n := asReplicas(t, e, ns, pool)
		return len(evs.Items) > 0 && n == want, fmt.Errorf("spec.replicas %d, %d ManualScaleOverridden events", n, len(evs.Items))
	})
	return msg
}

// waitPoolReady waits until the pool has at least want ready serving replicas.
func waitPoolReady(t testing.TB, e *Env, ns, name string, logs ctrlLogs, want int64, timeout time.Duration) {
	t.Helper()
	waitPool(t, e, ns, name, logs, timeout, fmt.Sprintf("AgentPool %s with %d ready replicas", name, want), func() (bool, error) {
		st, err := poolStatus(e, ns, name)
		if err != nil {
			return false, err
		}
		n, _ := st["readyReplicas"].(int64)
		return n >= want, fmt.Errorf("status %v", st)
	})
}

// poolDiagnosis renders what a person needs to see why a pool did not get where a test waited
// for: spec replicas and bounds, status and conditions, the pool's pods by state, its last 20
// Events and the controller's last 40 log lines that name it.
func poolDiagnosis(e *Env, ns, pool string, logs ctrlLogs) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- diagnosis of AgentPool %s/%s ---\n", ns, pool)
	if out, err := e.KubectlErr("get", "agentpool", pool, "-n", ns, "-o", "json"); err != nil {
		fmt.Fprintf(&b, "get: %v\n", err)
	} else {
		var obj struct {
			Metadata struct {
				Generation  int64             `json:"generation"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec   map[string]any `json:"spec"`
			Status map[string]any `json:"status"`
		}
		_ = json.Unmarshal([]byte(out), &obj)
		conds := obj.Status["conditions"]
		delete(obj.Status, "conditions")
		fmt.Fprintf(&b, "spec: replicas=%v min=%v max=%v (generation %d, annotations %v)\nstatus: %v\n",
			obj.Spec["replicas"], obj.Spec["minReplicas"], obj.Spec["maxReplicas"], obj.Metadata.Generation, obj.Metadata.Annotations, obj.Status)
		if l, ok := conds.([]any); ok {
			for _, c := range l {
				m, _ := c.(map[string]any)
				fmt.Fprintf(&b, "condition %v=%v (%v): %v\n", m["type"], m["status"], m["reason"], m["message"])
			}
		}
	}
	if out, err := e.KubectlErr("get", "pods", "-n", ns, "-l", "neuronetes.io/pool="+pool, "-L", "neuronetes.io/state", "--no-headers"); err == nil {
		fmt.Fprintf(&b, "pods:\n%s", out)
	}
	evs, err := e.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pool})
	if err != nil {
		fmt.Fprintf(&b, "events: %v\n", err)
	} else {
		items := evs.Items
		sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
		if len(items) > 20 {
			items = items[len(items)-20:]
		}
		for _, ev := range items {
			fmt.Fprintf(&b, "event %s %s %s x%d: %s\n", ev.LastTimestamp.Format(time.TimeOnly), ev.Type, ev.Reason, max(ev.Count, 1), ev.Message)
		}
	}
	if logs != nil {
		out, err := logs()
		if err != nil {
			fmt.Fprintf(&b, "controller logs: %v\n", err)
		}
		var mine []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, ns+"/"+pool) || strings.Contains(l, `"`+pool+`"`) {
				mine = append(mine, l)
			}
		}
		if len(mine) > 40 {
			mine = mine[len(mine)-40:]
		}
		fmt.Fprintf(&b, "controller log lines about the pool (%d shown):\n%s\n", len(mine), strings.Join(mine, "\n"))
	}
	return b.String()
}
