package agentsession

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func TestRestoreHostCandidates(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := func(name, hash, node string, running bool, age int) WarmPod {
		return WarmPod{Name: name, Hash: hash, Node: node, Host: true, Ready: running, Created: t0.Add(-time.Duration(age) * time.Second)}
	}
	agent := h("agent", "h", "n1", true, 99)
	agent.Host = false
	term := h("term", "h", "n2", true, 99)
	term.Terminating = true
	done := h("done", "h", "n2", true, 99)
	done.Done = true
	for _, tc := range []struct {
		name   string
		pods   []WarmPod
		prefer string
		want   []string
	}{
		{"none", nil, "n1", nil},
		{"running hosts of the current hash, oldest first", []WarmPod{h("young", "h", "n1", true, 1), h("stale", "x", "n1", true, 99), h("starting", "h", "n1", false, 50), h("old", "h", "n2", true, 30)}, "",
			[]string{"old", "young"}},
		{"the checkpoint's node first", []WarmPod{h("old", "h", "n1", true, 30), h("young", "h", "n2", true, 1)}, "n2", []string{"young", "old"}},
		{"preferred node without a host: the oldest", []WarmPod{h("young", "h", "n1", true, 1), h("old", "h", "n1", true, 30)}, "n9", []string{"old", "young"}},
		{"agent pods, terminating and finished hosts are never claimed", []WarmPod{agent, term, done, h("a", "h", "n1", true, 1)}, "n2", []string{"a"}},
		{"same age: by name", []WarmPod{h("b", "h", "n1", true, 5), h("a", "h", "n1", true, 5)}, "", []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := RestoreHostCandidates(tc.pods, "h", tc.prefer)
			if len(got) == 0 && len(tc.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("RestoreHostCandidates = %v, want %v", got, tc.want)
			}
		})
	}
	// A fresh session's claim never takes a restore host, even of the class's current hash.
	if got := ClaimCandidates([]WarmPod{h("host", "h", "n1", true, 1)}, "h"); len(got) != 0 {
		t.Fatalf("ClaimCandidates took restore hosts: %v", got)
	}
}

func TestCanClaimRestoreHost(t *testing.T) {
	hosts := func(rc *string, allowed ...string) *nnv1.AgentClass {
		c := testClass(rc, allowed...)
		c.Spec.Sessions = &nnv1.SessionsConfig{WarmRestoreHosts: 1}
		return c
	}
	poolOnly := testClass(nil)
	poolOnly.Spec.Sessions = &nnv1.SessionsConfig{WarmPoolSize: 3}
	drained := testSession(nil, "")
	drained.Status.DrainedNode = "n1"
	for _, tc := range []struct {
		name    string
		s       *nnv1.AgentSession
		class   *nnv1.AgentClass
		want    bool
		whyPart string
	}{
		{"plain session", testSession(nil, ""), hosts(nil), true, ""},
		{"no hosts", testSession(nil, ""), testClass(nil), false, "no warm restore hosts"},
		{"a warm pool is not hosts", testSession(nil, ""), poolOnly, false, "no warm restore hosts"},
		{"other workspace", testSession(nil, "2Gi"), hosts(nil), false, "spec.workspaceSizeLimit"},
		{"runtime class override", testSession(ptr("gvisor"), ""), hosts(ptr("runc"), "gvisor"), false, "spec.runtimeClassName"},
		{"drained: a host pod of its own, off the node", drained, hosts(nil), false, "drained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := CanClaimRestoreHost(tc.s, tc.class)
			if got != tc.want || (tc.whyPart != "" && !strings.Contains(why, tc.whyPart)) {
				t.Fatalf("CanClaimRestoreHost = %v %q, want %v (%q)", got, why, tc.want, tc.whyPart)
			}
		})
	}
}

func TestBuildWarmRestoreHost(t *testing.T) {
	class := testClass(nil)
	hash := RestoreHostHash(class, "pause:1")
	if hash == TemplateHash(class) || hash == RestoreHostHash(class, "pause:2") {
		t.Fatalf("restore host hash %s must differ from the template's and change with the image", hash)
	}
	p, err := BuildWarmRestoreHost(class, "warmpool-demo-abcde", hash, "pause:1")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Spec.Containers[0]
	if p.Name != "warmpool-demo-abcde" || p.Spec.ServiceAccountName != p.Name || c.Image != "pause:1" || len(c.Args) != 0 || c.LivenessProbe != nil || c.ReadinessProbe == nil {
		t.Fatalf("host pod %s as %s: container %+v", p.Name, p.Spec.ServiceAccountName, c)
	}
	if !IsRestoreHost(p) || p.Labels[nnv1.WarmPoolLabel] != "demo" || p.Labels[nnv1.WarmPoolTemplateHashLabel] != hash || p.Labels[nnv1.SessionLabel] != "" || p.Labels[nnv1.AgentClassLabel] != "demo" {
		t.Fatalf("labels %v", p.Labels)
	}
	// Its readiness is the agent's: it is claimable once its host container runs.
	if WarmPodOf(p).Ready {
		t.Fatal("an unstarted host counts as ready")
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if !WarmPodOf(p).Ready {
		t.Fatal("a host whose host container runs is not claimable")
	}
	if claimed := claimedPod(p, testSession(nil, "")); IsRestoreHost(claimed) || claimed.Labels[nnv1.WarmPoolLabel] != "" {
		t.Fatalf("claimed host keeps warm labels: %v", claimed.Labels)
	}
}

// hostRunsOn marks a warm restore host's host container running on node (the kubelet's job).
func hostRunsOn(t *testing.T, h *harness, name, node string, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	var p corev1.Pod
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	p.Spec.NodeName = node
	p.CreationTimestamp = metav1.NewTime(h.now.Add(-age))
	if err := h.c.Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: p.Spec.Containers[0].Name, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if err := h.c.Status().Update(ctx, &p); err != nil {
		t.Fatal(err)
	}
}

// TestResumeIntoWarmRestoreHost: a class keeps two warm restore hosts (on n1 and n2) beside its
// warm pool of agent pods; a new session does not take a host; its resume claims the host on
// n2, the node of its checkpoint, though the n1 host is older: the host is moved into the
// session (its label, the warm labels gone, the session its only controller, the session's
// NetworkPolicy), the Restore targets it, the session's ServiceAccount becomes the host's and is
// adopted on the next reconcile, and a ClaimedRestoreHost event is recorded; the replacement host
// waits HostRefillDelay. The session runs when the Restore Succeeded and the host is Ready; the
// hosts refill. Hosts of another class
// are never used: without a running host of its own class the resume creates s1-3.
func TestResumeIntoWarmRestoreHost(t *testing.T) {
	class := pooledClass(0)
	class.Spec.Sessions.WarmRestoreHosts = 2
	s := newSession(0)
	s.UID = "s1-uid"
	other := pooledClass(0)
	other.Name, other.UID = "other", "other-uid"
	other.Spec.Sessions.WarmRestoreHosts = 1
	h, w := warmHarness(t, class, other, s)
	rec := record.NewFakeRecorder(20)
	h.r.Recorder = rec
	w.RestoreHostImage = h.r.RestoreHostImage
	h.r.hostClaims = &hostClaims{}
	w.hostClaims = h.r.hostClaims
	ctx := context.Background()
	fillPool(t, w)
	fillPool(t, w) // nothing more: both are there
	hosts := warmPods(t, h.c)
	if len(hosts) != 2 || !IsRestoreHost(&hosts[0]) || !IsRestoreHost(&hosts[1]) {
		t.Fatalf("warm pods %d, want 2 restore hosts", len(hosts))
	}
	hostRunsOn(t, h, hosts[0].Name, "n1", time.Hour)
	hostRunsOn(t, h, hosts[1].Name, "n2", time.Minute)
	if _, err := w.Reconcile(ctx, reconcileReq("other")); err != nil {
		t.Fatal(err)
	}

	h.step(nnv1.SessionPending) // a fresh session never takes a host
	if !h.podExists("s1-1") {
		t.Fatal("no s1-1 for the fresh session")
	}
	h.ready("s1-1")
	got := h.step(nnv1.SessionRunning)
	if got.Status.ServiceAccountName != "session-s1" {
		t.Fatalf("status.serviceAccountName %q, want session-s1 (the fresh session's own)", got.Status.ServiceAccountName)
	}
	// s1-1 lingers after its deletion (a finalizer, as a kubelet still stopping it would).
	var p1 corev1.Pod
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "s1-1"}, &p1)
	p1.Finalizers = []string{"test/lingers"}
	if err := h.c.Update(ctx, &p1); err != nil {
		t.Fatal(err)
	}
	got.Spec.Suspend = true
	if err := h.c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	h.step(nnv1.SessionSuspending)
	ck := h.finish("s1-1-suspend", nnv1.AgentCheckpointSucceeded)
	ck.Status.NodeName = "n2"
	if err := h.c.Status().Update(ctx, ck); err != nil {
		t.Fatal(err)
	}
	got = h.step(nnv1.SessionSuspended)
	got.Spec.Suspend = false
	if err := h.c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}

	got = h.step(nnv1.SessionResuming)
	host := hosts[1].Name
	if got.Status.PodName != host || got.Status.Pods != 2 || got.Status.ServiceAccountName != host {
		t.Fatalf("status %+v, want the n2 host %s claimed", got.Status, host)
	}
	if h.podExists("s1-2") {
		t.Fatal("s1-2 created besides the claimed host")
	}
	var p corev1.Pod
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: host}, &p)
	if ref := metav1.GetControllerOf(&p); ref == nil || ref.UID != "s1-uid" || len(p.OwnerReferences) != 1 ||
		p.Labels[nnv1.SessionLabel] != "s1" || p.Labels[nnv1.WarmPoolLabel] != "" || IsRestoreHost(&p) {
		t.Fatalf("claimed host owner %+v labels %v", p.OwnerReferences, p.Labels)
	}
	var rs nnv1.AgentCheckpoint
	if err := h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "s1-2-resume"}, &rs); err != nil || rs.Spec.Target.Pod != host || rs.Spec.CheckpointID != ck.Status.CheckpointID {
		t.Fatalf("restore %+v: %v", rs.Spec, err)
	}
	checkSessionPDB(t, h.c)
	// The replacement host waits HostRefillDelay after the claim (the restore runs meanwhile).
	countHosts := func() int {
		n := 0
		for _, p := range warmPods(t, h.c) {
			if IsRestoreHost(&p) && metav1.GetControllerOf(&p).UID == "class-uid" {
				n++
			}
		}
		return n
	}
	res, err := w.Reconcile(ctx, reconcileReq("demo"))
	if err != nil || res.RequeueAfter != HostRefillDelay || countHosts() != 1 {
		t.Fatalf("refill right after the claim: %+v %v, %d hosts; want 1 host and a requeue after %v", res, err, countHosts(), HostRefillDelay)
	}
	h.now = h.now.Add(HostRefillDelay)
	if ev := drain(rec); !strings.Contains(ev, ClaimHostReason+" resuming into warm restore host "+host+" on n2") {
		t.Fatalf("events %q, want %s", ev, ClaimHostReason)
	}
	if got.Status.RetiredServiceAccountNames == nil || got.Status.RetiredServiceAccountNames[0] != "session-s1" || len(got.Status.RetiredServiceAccountNames) != 1 {
		t.Fatalf("retired serviceaccounts %v after the claim, want [session-s1]", got.Status.RetiredServiceAccountNames)
	}
	got = h.step(nnv1.SessionResuming) // adopts the host's ServiceAccount
	var sa corev1.ServiceAccount
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: host}, &sa)
	if ref := metav1.GetControllerOf(&sa); ref == nil || ref.UID != "s1-uid" || sa.Labels[nnv1.SessionLabel] != "s1" {
		t.Fatalf("host serviceaccount owners %+v labels %v, want the session's", sa.OwnerReferences, sa.Labels)
	}
	// The old ServiceAccount stays while the terminating s1-1 still runs as it ...
	if !h.serviceAccountExists("session-s1") || len(got.Status.RetiredServiceAccountNames) != 1 {
		t.Fatalf("session-s1 deleted (or dropped: %v) while pod s1-1 still runs as it", got.Status.RetiredServiceAccountNames)
	}
	// ... and goes, with its entry, once no pod of the session runs as it.
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "s1-1"}, &p1)
	p1.Finalizers = nil
	if err := h.c.Update(ctx, &p1); err != nil {
		t.Fatal(err)
	}
	got = h.step(nnv1.SessionResuming)
	if h.serviceAccountExists("session-s1") || len(got.Status.RetiredServiceAccountNames) != 0 || got.Status.ServiceAccountName != host {
		t.Fatalf("after s1-1 went: session-s1 exists %v, retired %v, serviceAccountName %q; want it deleted, none retired, %s",
			h.serviceAccountExists("session-s1"), got.Status.RetiredServiceAccountNames, got.Status.ServiceAccountName, host)
	}
	if !h.serviceAccountExists(host) {
		t.Fatalf("the host's ServiceAccount %s, which the session runs as, was deleted", host)
	}
	h.finish("s1-2-resume", nnv1.AgentCheckpointSucceeded)
	h.ready(host)
	got = h.step(nnv1.SessionRunning)
	if got.Status.PodName != host {
		t.Fatalf("running in %s, want %s", got.Status.PodName, host)
	}
	fillPool(t, w)
	if n := countHosts(); n != 2 {
		t.Fatalf("%d restore hosts after the refill delay, want 2", n)
	}

	// Suspended again with only the other class's host running: a host pod of its own.
	for _, p := range warmPods(t, h.c) {
		if err := h.c.Delete(ctx, &p); err != nil {
			t.Fatal(err)
		}
	}
	got.Spec.Suspend = true
	_ = h.c.Update(ctx, got)
	h.step(nnv1.SessionSuspending)
	h.finish("s1-2-suspend", nnv1.AgentCheckpointSucceeded)
	got = h.step(nnv1.SessionSuspended)
	var others corev1.PodList
	_ = h.c.List(ctx, &others, client.InNamespace("a"), client.MatchingLabels{nnv1.WarmPoolLabel: "other"})
	if len(others.Items) != 1 {
		t.Fatalf("%d hosts of the other class", len(others.Items))
	}
	hostRunsOn(t, h, others.Items[0].Name, "n2", time.Hour)
	got.Spec.Suspend = false
	_ = h.c.Update(ctx, got)
	got = h.step(nnv1.SessionResuming)
	if got.Status.PodName != "s1-3" || !h.podExists("s1-3") {
		t.Fatalf("resumed into %s, want a new s1-3 (no running host of its class)", got.Status.PodName)
	}
	var p3 corev1.Pod
	_ = h.c.Get(ctx, types.NamespacedName{Namespace: "a", Name: "s1-3"}, &p3)
	if p3.Spec.ServiceAccountName != host {
		t.Fatalf("s1-3 runs as %q, want the session's %s", p3.Spec.ServiceAccountName, host)
	}
	// A resume into a pod of its own keeps the ServiceAccount: nothing retired, nothing deleted.
	got = h.step(nnv1.SessionResuming)
	if !h.serviceAccountExists(host) || len(got.Status.RetiredServiceAccountNames) != 0 || got.Status.ServiceAccountName != host {
		t.Fatalf("after the resume into s1-3: %s exists %v, retired %v, serviceAccountName %q", host, h.serviceAccountExists(host), got.Status.RetiredServiceAccountNames, got.Status.ServiceAccountName)
	}
}

func (h *harness) serviceAccountExists(name string) bool {
	h.t.Helper()
	var sa corev1.ServiceAccount
	err := h.c.Get(context.Background(), types.NamespacedName{Namespace: "a", Name: name}, &sa)
	if err != nil && !apierrors.IsNotFound(err) {
		h.t.Fatal(err)
	}
	return err == nil
}

// TestRetirableServiceAccounts: a retired ServiceAccount is deleted only when it is not the
// session's current one and no pod of the session runs as it.
func TestRetirableServiceAccounts(t *testing.T) {
	for _, tc := range []struct {
		name          string
		retired, pods []string
		current       string
		del, keep     []string
	}{
		{"none retired", nil, []string{"warmpool-demo-a"}, "warmpool-demo-a", nil, nil},
		{"unused: deleted", []string{"session-s1"}, []string{"warmpool-demo-a"}, "warmpool-demo-a", []string{"session-s1"}, nil},
		{"a terminating pod still runs as it", []string{"session-s1"}, []string{"session-s1", "warmpool-demo-a"}, "warmpool-demo-a", nil, []string{"session-s1"}},
		{"the current one is never deleted", []string{"warmpool-demo-a", "session-s1"}, nil, "warmpool-demo-a", []string{"session-s1"}, []string{"warmpool-demo-a"}},
		{"several, one in use", []string{"session-s1", "warmpool-demo-a"}, []string{"warmpool-demo-a"}, "warmpool-demo-b", []string{"session-s1"}, []string{"warmpool-demo-a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			del, keep := RetirableServiceAccounts(tc.retired, tc.current, tc.pods)
			if !reflect.DeepEqual(del, tc.del) || !reflect.DeepEqual(keep, tc.keep) {
				t.Fatalf("RetirableServiceAccounts = %v, %v; want %v, %v", del, keep, tc.del, tc.keep)
			}
		})
	}
}

// TestUseServiceAccount: a claim retires the ServiceAccount the session ran as (session-<s> for a
// session with pods but none recorded), once; a fresh session retires none.
func TestUseServiceAccount(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  nnv1.AgentSessionStatus
		use     string
		retired []string
	}{
		{"fresh session", nnv1.AgentSessionStatus{}, "warmpool-demo-a", nil},
		{"pods without a recorded account: session-<s>", nnv1.AgentSessionStatus{Pods: 1}, "warmpool-demo-a", []string{"session-s1"}},
		{"recorded session-<s>", nnv1.AgentSessionStatus{Pods: 1, ServiceAccountName: "session-s1"}, "warmpool-demo-a", []string{"session-s1"}},
		{"an earlier host's", nnv1.AgentSessionStatus{Pods: 3, ServiceAccountName: "warmpool-demo-a", RetiredServiceAccountNames: []string{"session-s1"}}, "warmpool-demo-b", []string{"session-s1", "warmpool-demo-a"}},
		{"the same one again", nnv1.AgentSessionStatus{Pods: 2, ServiceAccountName: "warmpool-demo-a"}, "warmpool-demo-a", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSession(nil, "")
			s.Status = tc.status
			useServiceAccount(s, tc.use)
			if s.Status.ServiceAccountName != tc.use || !reflect.DeepEqual(s.Status.RetiredServiceAccountNames, tc.retired) {
				t.Fatalf("status %q retired %v, want %q retired %v", s.Status.ServiceAccountName, s.Status.RetiredServiceAccountNames, tc.use, tc.retired)
			}
		})
	}
}

func TestRefillWait(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		last, now time.Time
		want      time.Duration
	}{
		{"never claimed", time.Time{}, t0, 0},
		{"just claimed", t0, t0, 2 * time.Second},
		{"half way", t0, t0.Add(1500 * time.Millisecond), 500 * time.Millisecond},
		{"delay passed", t0, t0.Add(2 * time.Second), 0},
		{"long ago", t0, t0.Add(time.Hour), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RefillWait(tc.last, tc.now, 2*time.Second); got != tc.want {
				t.Fatalf("RefillWait = %v, want %v", got, tc.want)
			}
		})
	}
}

func reconcileReq(class string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: class}}
}

// drain returns the events recorded so far, one per line.
func drain(rec *record.FakeRecorder) string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

// TestWarmPoolKeepsAgentsAndHostsApart: a class with a warm pool of 1 and 2 restore hosts gets
// one agent pod and two hosts, each kind sized on its own; without a restore host image the
// controller keeps no hosts. A suspended session whose status.lastCheckpoint is another
// namespace's claims no host (and creates nothing).
func TestWarmPoolKeepsAgentsAndHostsApart(t *testing.T) {
	class := pooledClass(1)
	class.Spec.Sessions.WarmRestoreHosts = 2
	s := newSession(time.Hour)
	s.Status = nnv1.AgentSessionStatus{Phase: nnv1.SessionSuspended, SuspendedByRequest: true, LastCheckpoint: "victim.s1-1-suspend", Pods: 1}
	h, w := warmHarness(t, class, s)
	fillPool(t, w) // no image: agent pods only
	if n := len(warmPods(t, h.c)); n != 1 {
		t.Fatalf("%d warm pods without a restore host image, want 1", n)
	}
	w.RestoreHostImage = h.r.RestoreHostImage
	fillPool(t, w)
	fillPool(t, w)
	var agents, hosts int
	for _, p := range warmPods(t, h.c) {
		if IsRestoreHost(&p) {
			hosts++
			hostRunsOn(t, h, p.Name, "n1", time.Minute)
		} else {
			agents++
		}
	}
	if agents != 1 || hosts != 2 {
		t.Fatalf("%d agent pods and %d hosts, want 1 and 2", agents, hosts)
	}
	if _, err := h.reconcile(); err == nil || !strings.Contains(err.Error(), "status.lastCheckpoint") {
		t.Fatalf("reconcile: %v, want an error naming status.lastCheckpoint", err)
	}
	for _, p := range warmPods(t, h.c) {
		if p.Labels[nnv1.SessionLabel] != "" {
			t.Fatalf("warm pod %s claimed for a foreign checkpoint", p.Name)
		}
	}
	if n := len(warmPods(t, h.c)); n != 3 {
		t.Fatalf("%d warm pods, want all 3 unclaimed", n)
	}
}
