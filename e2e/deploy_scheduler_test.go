package e2e

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/neuronetes/neuronetes/e2e/cluster"
)

// schedulerPods returns the names of the release's running neuronetes-scheduler pods.
func schedulerPods(t *testing.T, e *Env, r *deployRelease) []string {
	t.Helper()
	l, err := e.Kube.CoreV1().Pods(r.namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + r.name + ",app.kubernetes.io/component=scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range l.Items {
		if p.Status.Phase == corev1.PodRunning {
			out = append(out, p.Name)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no running scheduler pod of release %s in %s", r.name, r.namespace)
	}
	return out
}

// deploySchedulerBindsPods: a pod with spec.schedulerName neuronetes in the tenant namespace is
// bound by the chart's neuronetes-scheduler: its Scheduled event comes from the controller
// "neuronetes" (the profile) and the instance of a running scheduler pod of the release, the
// scheduler holds its Lease in the release namespace, and its log shows no refused request.
func deploySchedulerBindsPods(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	sched := schedulerPods(t, e, r)
	const name = "nn-sched-probe"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			SchedulerName:                 "neuronetes",
			TerminationGracePeriodSeconds: ptr(int64(1)),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "pause", Image: cluster.PauseImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	if _, err := e.Kube.CoreV1().Pods(r.exampleNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Kube.CoreV1().Pods(r.exampleNS).Delete(ctx, name, metav1.DeleteOptions{}) })
	var ev corev1.Event
	Eventually(t, time.Minute, "the Scheduled event of "+name, func() (bool, error) {
		l, err := e.Kube.CoreV1().Events(r.exampleNS).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + name + ",reason=Scheduled"})
		if err != nil || len(l.Items) == 0 {
			return false, fmt.Errorf("no Scheduled event yet (%v)", err)
		}
		ev = l.Items[0]
		return true, nil
	})
	p, err := e.Kube.CoreV1().Pods(r.exampleNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("[e2e] %s bound to %s: %q by %s/%s", name, p.Spec.NodeName, ev.Message, ev.ReportingController, ev.ReportingInstance)
	if p.Spec.NodeName == "" {
		t.Errorf("pod not bound after its Scheduled event")
	}
	if ev.ReportingController != "neuronetes" {
		t.Errorf("Scheduled by %q, want the profile neuronetes", ev.ReportingController)
	}
	ours := false
	for _, s := range sched {
		ours = ours || strings.Contains(ev.ReportingInstance, s)
	}
	if !ours {
		t.Errorf("Scheduled by instance %q, not one of the release's scheduler pods %v", ev.ReportingInstance, sched)
	}
	lease, err := e.Kube.CoordinationV1().Leases(r.namespace).Get(ctx, "neuronetes-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the scheduler's Lease: %v", err)
	}
	held := false
	for _, s := range sched {
		held = held || lease.Spec.HolderIdentity != nil && strings.HasPrefix(*lease.Spec.HolderIdentity, s)
	}
	if !held {
		t.Errorf("Lease neuronetes-scheduler held by %v, want a scheduler pod of the release %v", lease.Spec.HolderIdentity, sched)
	}
	// Every request the scheduler makes is granted: no "forbidden" in its log (the chart runs it
	// with --authentication-skip-lookup, so it does not read kube-system's
	// extension-apiserver-authentication ConfigMap, which it may not).
	for _, s := range sched {
		raw, err := e.Kube.CoreV1().Pods(r.namespace).GetLogs(s, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", s, err)
		}
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, "forbidden") {
				t.Errorf("%s was refused: %s", s, l)
			}
		}
	}
}

// deployAttackSchedulerAccount: neuronetes-scheduler's ServiceAccount, which holds a scheduler's
// cluster-wide rights, reads no Secret of a tenant, creates no pod, writes no AgentCheckpoint and
// updates no Lease of the release namespace but its own; the victims are unchanged.
func deployAttackSchedulerAccount(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	user := releaseAccounts(t, e, r)["scheduler"]
	if user == "" {
		t.Fatal("no scheduler ServiceAccount in the release")
	}
	as := impersonate(t, e, user, nil)
	secret, err := e.Kube.CoreV1().Secrets(r.exampleNS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nn-e2e-victim-"}, StringData: map[string]string{"k": "tenant-secret"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Kube.CoreV1().Secrets(r.exampleNS).Delete(ctx, secret.Name, metav1.DeleteOptions{}) })
	_, err = as.CoreV1().Secrets(r.exampleNS).Get(ctx, secret.Name, metav1.GetOptions{})
	wantForbidden(t, err)
	_, err = as.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	wantForbidden(t, err)
	_, err = as.CoreV1().Pods(r.exampleNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nn-e2e-sched-made"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: cluster.PauseImage}}}}, metav1.CreateOptions{})
	wantForbidden(t, err)

	lease, err := e.Kube.CoordinationV1().Leases(r.namespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nn-e2e-victim-"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("victim")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Kube.CoordinationV1().Leases(r.namespace).Delete(ctx, lease.Name, metav1.DeleteOptions{})
	})
	mod := lease.DeepCopy()
	mod.Spec.HolderIdentity = ptr("scheduler")
	_, err = as.CoordinationV1().Leases(r.namespace).Update(ctx, mod, metav1.UpdateOptions{})
	wantForbidden(t, err)

	for _, ra := range []authzv1.ResourceAttributes{
		{Namespace: r.exampleNS, Group: "neuronetes.io", Resource: "agentcheckpoints", Verb: "update"},
		{Namespace: r.exampleNS, Group: "neuronetes.io", Resource: "agentpools", Verb: "get"},
		{Namespace: "kube-system", Resource: "configmaps", Verb: "get"},
	} {
		rev, err := as.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rev.Status.Allowed {
			t.Errorf("the scheduler may %s %s/%s in %s", ra.Verb, ra.Group, ra.Resource, ra.Namespace)
		}
	}

	now, err := e.Kube.CoreV1().Secrets(r.exampleNS).Get(ctx, secret.Name, metav1.GetOptions{})
	if err != nil || string(now.Data["k"]) != "tenant-secret" {
		t.Errorf("victim Secret changed: %v", err)
	}
	l, err := e.Kube.CoordinationV1().Leases(r.namespace).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "victim" {
		t.Errorf("victim Lease changed: %v", err)
	}
	if _, err := e.Kube.CoreV1().Pods(r.exampleNS).Get(ctx, "nn-e2e-sched-made", metav1.GetOptions{}); err == nil {
		t.Errorf("the scheduler's account created a pod")
	}
}

// deployAttackSchedulerNetwork: an ordinary pod in another namespace, with or without the
// scheduler's labels, reaches neither the scheduler's port nor the gateway's admin port; a pod
// with the scheduler's labels in the release namespace reaches the gateway's admin port (the rule
// NeuroNetesHeadroom's reads pass).
func deployAttackSchedulerNetwork(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	schedPort := net.JoinHostPort(releasePodIP(t, e, r, "scheduler"), "10259")
	gwAdmin := net.JoinHostPort(releasePodIP(t, e, r, "gateway"), "9090")
	img := e.Image(t, "netcheck", "./e2e/cmd/netcheck")
	labels := fmt.Sprintf("app.kubernetes.io/name: neuronetes, app.kubernetes.io/instance: %s, app.kubernetes.io/component: scheduler", r.name)
	attackerNS := e.Namespace(t, "sched-attacker")
	for _, c := range []struct{ name, labels string }{{"attacker", ""}, {"attacker-as-scheduler", labels}} {
		got := dialOutcomes(runNetcheckLabelled(t, e, attackerNS, c.name, img, c.labels, "probe", "-dial", schedPort, "-dial", gwAdmin))
		for _, a := range []string{schedPort, gwAdmin} {
			if msg, ok := got[a]; !ok || msg == "" {
				t.Errorf("%s in %s reached %s (result %q, present %v), want it refused", c.name, attackerNS, a, msg, ok)
			}
		}
	}
	const peer = "sched-peer"
	t.Cleanup(func() { _ = e.Kube.CoreV1().Pods(r.namespace).Delete(ctx, peer, metav1.DeleteOptions{}) })
	got := dialOutcomes(runNetcheckLabelled(t, e, r.namespace, peer, img, labels, "probe", "-dial", gwAdmin))
	if msg, ok := got[gwAdmin]; !ok || msg != "" {
		t.Errorf("a pod with the scheduler's labels in the release namespace could not reach the gateway's admin port %s: %q", gwAdmin, msg)
	}
}
