package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/apikeyhash"
)

// rbacAllowlist is the checked-in list of every right each ServiceAccount of the chart may hold,
// one "<account> <scope> <group>/<resource>[/<names>] <verb>" or "<account> <scope> url:<path>
// <verb>" per line. <account> is the ServiceAccount name less the release's fullname prefix,
// <scope> is "tenant" (a namespace the release watches), "release" (the release's own namespace)
// or "system" (kube-system).
const rbacAllowlist = "testdata/rbac-allowlist.txt"

// nodeNameExtra is the user-info extra a pod-bound ServiceAccount token carries for its node.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// impersonate returns a clientset acting as user, with the given extras.
func impersonate(t *testing.T, e *Env, user string, extra map[string][]string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Extra: extra}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// releaseAccounts maps the short name of each ServiceAccount of the release to its username.
func releaseAccounts(t *testing.T, e *Env, r *deployRelease) map[string]string {
	t.Helper()
	l, err := e.Kube.CoreV1().ServiceAccounts(r.namespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.name})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, sa := range l.Items {
		short := strings.TrimPrefix(strings.TrimPrefix(sa.Name, r.name+"-neuronetes"), r.name)
		out[strings.TrimPrefix(short, "-")] = "system:serviceaccount:" + r.namespace + ":" + sa.Name
	}
	if len(out) == 0 {
		t.Fatalf("no ServiceAccounts of release %s in %s", r.name, r.namespace)
	}
	return out
}

// rightsOf lists what user may do in ns (SelfSubjectRulesReview, as `kubectl auth can-i --list`
// prints it), one right per verb, sorted.
func rightsOf(t *testing.T, e *Env, r *deployRelease, user, account, scope, ns string) []string {
	t.Helper()
	rev, err := impersonate(t, e, user, nil).AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authzv1.SelfSubjectRulesReview{Spec: authzv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("rules of %s in %s: %v", user, ns, err)
	}
	set := map[string]bool{}
	for _, rule := range rev.Status.ResourceRules {
		for _, g := range rule.APIGroups {
			for _, res := range rule.Resources {
				name := g + "/" + res
				if len(rule.ResourceNames) > 0 {
					name += "/" + resourceNamesRight(rule.ResourceNames)
				}
				for _, v := range rule.Verbs {
					set[fmt.Sprintf("%s %s %s %s", account, scope, name, v)] = true
				}
			}
		}
	}
	for _, rule := range rev.Status.NonResourceRules {
		for _, u := range rule.NonResourceURLs {
			for _, v := range rule.Verbs {
				set[fmt.Sprintf("%s %s url:%s %s", account, scope, u, v)] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		k = strings.NewReplacer(r.namespace, "<release-namespace>", r.exampleNS, "<tenant-namespace>").Replace(k)
		out = append(out, strings.ReplaceAll(k, r.name, "<release>"))
	}
	sort.Strings(out)
	return out
}

// resourceNamesRight is how a rule's resourceNames read in the allowlist: sorted. (No account may
// get the Model source copies by name: the node agents ask the controller's endpoint.)
func resourceNamesRight(names []string) string {
	out := slices.Clone(names)
	sort.Strings(out)
	return strings.Join(slices.Compact(out), ",")
}

// deployRBACAllowlist prints every right of every ServiceAccount of the release and fails on one
// that the checked-in allowlist lacks. NEURONETES_RBAC_ALLOWLIST_WRITE=1 rewrites the allowlist
// from what the cluster grants (review the diff: every new line is a new right).
func deployRBACAllowlist(t *testing.T, e *Env, r *deployRelease) {
	var got []string
	for account, user := range releaseAccounts(t, e, r) {
		for _, sc := range []struct{ scope, ns string }{{"tenant", r.exampleNS}, {"release", r.namespace}, {"system", "kube-system"}} {
			got = append(got, rightsOf(t, e, r, user, account, sc.scope, sc.ns)...)
		}
	}
	sort.Strings(got)
	t.Logf("[e2e] rights of the release's ServiceAccounts (kubectl auth can-i --list --as system:serviceaccount:%s:<account> -n <ns>):\n%s",
		r.namespace, strings.Join(got, "\n"))
	path := filepath.Join(e.Root, "e2e", rbacAllowlist)
	if os.Getenv("NEURONETES_RBAC_ALLOWLIST_WRITE") == "1" {
		head := "# Every right the chart's ServiceAccounts may hold (e2e TestDeployLocal/RBACAllowlist).\n" +
			"# <account> <scope: tenant namespace | release namespace | kube-system> <group>/<resource>[/<names>] <verb>\n"
		if err := os.WriteFile(path, []byte(head+strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("allowlist: %v", err)
	}
	allowed := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			allowed[l] = true
		}
	}
	for _, g := range got {
		if !allowed[g] {
			t.Errorf("right outside %s: %s", rbacAllowlist, g)
		}
	}
}

// deployAdmissionPolicies tries, as the release's own ServiceAccounts, the writes their RBAC
// allows but the chart's ValidatingAdmissionPolicies refuse, and checks the victims are unchanged.
func deployAdmissionPolicies(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	accounts := releaseAccounts(t, e, r)
	t.Run("ControllerWritesKubeSystemConfigMap", func(t *testing.T) {
		victim, err := e.Kube.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "nn-e2e-victim-"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Kube.CoreV1().ConfigMaps("kube-system").Delete(ctx, victim.Name, metav1.DeleteOptions{}) })
		ctl := impersonate(t, e, accounts["controller"], nil)
		mod := victim.DeepCopy()
		mod.Data["k"] = "attacker"
		_, err = ctl.CoreV1().ConfigMaps("kube-system").Update(ctx, mod, metav1.UpdateOptions{})
		// This release sets controller.watchNamespace, so RBAC already refuses it (the controller's
		// ConfigMap rights are a Role in the watched namespace); a controller watching every
		// namespace is refused by the admission policy ("may not write configmaps in the system
		// namespace", TestChartAdmissionPolicies). Either way: Forbidden, the victim unchanged.
		wantForbidden(t, err)
		_, err = ctl.CoreV1().ConfigMaps(r.exampleNS).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "not-autoscaler-state"}}, metav1.CreateOptions{})
		wantRefused(t, err, "only ConfigMaps named autoscaler-state.<pool>")
		now, err := e.Kube.CoreV1().ConfigMaps("kube-system").Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil || now.Data["k"] != "v" {
			t.Fatalf("victim ConfigMap changed: %v %v", now.Data, err)
		}
	})
	t.Run("ControllerCreatesUnlabelledPod", func(t *testing.T) {
		ctl := impersonate(t, e, accounts["controller"], nil)
		// Restricted, as the tenant namespace enforces, so the admission policy is what refuses it.
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nn-e2e-not-a-pool-pod"},
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox", SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				}}},
			}}
		_, err := ctl.CoreV1().Pods(r.exampleNS).Create(ctx, pod, metav1.CreateOptions{})
		wantRefused(t, err, "labelled neuronetes.io/pool")
	})
	t.Run("TenantPassesPodOffAsPoolPod", func(t *testing.T) {
		// A namespace user (here the test's own admin identity, which the policy treats like any
		// user but the controller) creates a pod whose controller is an AgentPool, then adds that
		// owner to a plain pod of its own: both refused, so no pod it runs is taken for a pool's.
		yes, no, uid := true, false, int64(65532)
		owner := metav1.OwnerReference{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentPool", Name: "agents", UID: "0b7d4f0e-0000-4000-8000-000000000001", Controller: &yes}
		spec := corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}
		forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nn-e2e-forged-pool-pod", OwnerReferences: []metav1.OwnerReference{owner}}, Spec: spec}
		_, err := e.Kube.CoreV1().Pods(r.exampleNS).Create(ctx, forged, metav1.CreateOptions{})
		wantRefused(t, err, "only the NeuroNetes controller may create a pod owned by an AgentPool")
		plain, err := e.Kube.CoreV1().Pods(r.exampleNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "nn-e2e-plain-pod"}, Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a plain pod was refused: %v", err)
		}
		t.Cleanup(func() {
			_ = e.Kube.CoreV1().Pods(r.exampleNS).Delete(context.Background(), plain.Name, metav1.DeleteOptions{})
		})
		// A merge patch (an UPDATE at admission) needs no resourceVersion: the pod's status moves on.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{owner}}})
		_, err = e.Kube.CoreV1().Pods(r.exampleNS).Patch(ctx, plain.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		wantRefused(t, err, "only the NeuroNetes controller")
		now, err := e.Kube.CoreV1().Pods(r.exampleNS).Get(ctx, plain.Name, metav1.GetOptions{})
		if err != nil || len(now.OwnerReferences) != 0 {
			t.Fatalf("the plain pod has owners %v (%v)", now.OwnerReferences, err)
		}
	})
	t.Run("TenantPassesPodOffAsSessionPod", func(t *testing.T) {
		// The tool proxy trusts a pod controlled by an AgentSession as that session: a namespace
		// user may not create one.
		yes, no, uid := true, false, int64(65532)
		owner := metav1.OwnerReference{APIVersion: "neuronetes.io/v1alpha1", Kind: "AgentSession", Name: "s1", UID: "0b7d4f0e-0000-4000-8000-000000000002", Controller: &yes}
		forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "s1-1", Labels: map[string]string{"neuronetes.io/session": "s1"}, OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"},
					SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}}}}
		_, err := e.Kube.CoreV1().Pods(r.exampleNS).Create(ctx, forged, metav1.CreateOptions{})
		wantRefused(t, err, "only the NeuroNetes controller may create a pod owned by an AgentPool or an AgentSession")
		if _, err := e.Kube.CoreV1().Pods(r.exampleNS).Get(ctx, forged.Name, metav1.GetOptions{}); err == nil {
			t.Fatal("the forged session pod exists")
		}
	})
	t.Run("ControllerCreatesForeignServiceAccount", func(t *testing.T) {
		// RBAC lets the controller create any ServiceAccount (for sessions); the policy admits
		// only session-<s> of an AgentSession <s>, without a token.
		ctl := impersonate(t, e, accounts["controller"], nil)
		for _, sa := range []*corev1.ServiceAccount{
			{ObjectMeta: metav1.ObjectMeta{Name: "nn-e2e-admin"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "session-s1", Labels: map[string]string{"neuronetes.io/session": "s1"}}},
		} {
			_, err := ctl.CoreV1().ServiceAccounts(r.exampleNS).Create(ctx, sa, metav1.CreateOptions{})
			wantRefused(t, err, "may only create ServiceAccounts session-<s> of an AgentSession")
			if _, err := e.Kube.CoreV1().ServiceAccounts(r.exampleNS).Get(ctx, sa.Name, metav1.GetOptions{}); err == nil {
				t.Fatalf("ServiceAccount %s was created", sa.Name)
			}
		}
	})
	t.Run("ControllerChangesForeignServiceAccount", func(t *testing.T) {
		// RBAC lets the controller patch and delete ServiceAccounts (the warm session pool's); the
		// policy admits only a warm pod's own, never a tenant's.
		victim := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nn-e2e-victim", Labels: map[string]string{"team": "a"}}}
		if _, err := e.Kube.CoreV1().ServiceAccounts(r.exampleNS).Create(ctx, victim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.Kube.CoreV1().ServiceAccounts(r.exampleNS).Delete(ctx, victim.Name, metav1.DeleteOptions{})
		})
		ctl := impersonate(t, e, accounts["controller"], nil)
		patch := []byte(`{"metadata":{"labels":{"neuronetes.io/session":"s1"}}}`)
		_, err := ctl.CoreV1().ServiceAccounts(r.exampleNS).Patch(ctx, victim.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		wantRefused(t, err, "may only create ServiceAccounts session-<s> of an AgentSession")
		err = ctl.CoreV1().ServiceAccounts(r.exampleNS).Delete(ctx, victim.Name, metav1.DeleteOptions{})
		wantRefused(t, err, "may only create ServiceAccounts session-<s> of an AgentSession")
		got, err := e.Kube.CoreV1().ServiceAccounts(r.exampleNS).Get(ctx, victim.Name, metav1.GetOptions{})
		if err != nil || len(got.Labels) != 1 || got.Labels["team"] != "a" {
			t.Fatalf("the victim ServiceAccount changed: %v %v", got.Labels, err)
		}
	})
	t.Run("ControllerCreatesForeignPodDisruptionBudget", func(t *testing.T) {
		attackControllerCreatesForeignPDB(t, e, r.exampleNS, accounts["controller"])
	})
	t.Run("ControllerDeletesForeignCheckpoint", func(t *testing.T) {
		attackControllerDeletesForeignCheckpoint(t, e, r.exampleNS, accounts["controller"])
	})
	t.Run("ControllerDeletesForeignSession", func(t *testing.T) {
		attackControllerDeletesForeignSession(t, e, r.exampleNS, accounts["controller"])
	})
	t.Run("GatewayChangesSession", func(t *testing.T) {
		attackGatewayChangesSession(t, e, r.exampleNS, accounts["gateway"])
	})
	t.Run("NodeAgentPatchesAnotherNode", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"nn-e2e-attack":"1"}}}`)
		for _, tc := range []struct {
			what  string
			extra map[string][]string
			want  string
		}{
			{"a token bound to another node", map[string][]string{nodeNameExtra: {"some-other-node"}}, "may not patch node"},
			{"a token bound to no node", nil, "pod-bound token that names their node"},
		} {
			agent := impersonate(t, e, accounts["nodeagent"], tc.extra)
			_, err := agent.CoreV1().Nodes().Patch(ctx, e.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
			wantRefused(t, err, tc.want)
		}
		// The driver may not write Nodes at all (RBAC), not even its own.
		drv := impersonate(t, e, accounts["driver"], map[string][]string{nodeNameExtra: {e.NodeName}})
		_, err := drv.CoreV1().Nodes().Patch(ctx, e.NodeName, types.MergePatchType, patch, metav1.PatchOptions{})
		wantForbidden(t, err)
		n, err := e.Kube.CoreV1().Nodes().Get(ctx, e.NodeName, metav1.GetOptions{})
		if err != nil || n.Labels["nn-e2e-attack"] != "" {
			t.Fatalf("node %s was labelled: %v %v", e.NodeName, n.Labels, err)
		}
	})
	t.Run("DriverDeletesAnotherNodesSlice", func(t *testing.T) {
		other := map[string][]string{nodeNameExtra: {"some-other-node"}}
		slices, err := impersonate(t, e, accounts["driver"], other).ResourceV1().ResourceSlices().List(ctx, nodeSlices(e))
		if err != nil || len(slices.Items) == 0 {
			t.Fatalf("the driver account cannot list the node's ResourceSlices: %v", err)
		}
		err = impersonate(t, e, accounts["driver"], other).ResourceV1().ResourceSlices().Delete(ctx, slices.Items[0].Name, metav1.DeleteOptions{})
		wantRefused(t, err, "only the ResourceSlices of its own node")
		// The node agent may not touch ResourceSlices at all (RBAC), not even its own node's.
		own := map[string][]string{nodeNameExtra: {e.NodeName}}
		err = impersonate(t, e, accounts["nodeagent"], own).ResourceV1().ResourceSlices().Delete(ctx, slices.Items[0].Name, metav1.DeleteOptions{})
		wantForbidden(t, err)
		if _, err := e.Kube.ResourceV1().ResourceSlices().Get(ctx, slices.Items[0].Name, metav1.GetOptions{}); err != nil {
			t.Fatalf("ResourceSlice %s is gone: %v", slices.Items[0].Name, err)
		}
	})
	t.Run("DriverReadsSecret", func(t *testing.T) {
		victim := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "nn-e2e-victim-"}, StringData: map[string]string{"k": "v"}}
		victim, err := e.Kube.CoreV1().Secrets(r.exampleNS).Create(ctx, victim, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.Kube.CoreV1().Secrets(r.exampleNS).Delete(context.Background(), victim.Name, metav1.DeleteOptions{})
		})
		drv := impersonate(t, e, accounts["driver"], map[string][]string{nodeNameExtra: {e.NodeName}})
		_, err = drv.CoreV1().Secrets(r.exampleNS).Get(ctx, victim.Name, metav1.GetOptions{})
		wantForbidden(t, err)
	})
}

// deployAttackGatewayReadsSecret: the internet-facing gateway holds no Secret right in any mode
// (it reads the API-key hashes the controller publishes): as its ServiceAccount, `kubectl auth
// can-i get|list|watch secrets` says no in a tenant namespace and in the release namespace, and a
// get of a tenant's API-key Secret is Forbidden. What it reads instead, the controller's ConfigMap
// in the release namespace, holds the key's SHA-256 and not the key. The controller may not plant
// a published API-key ConfigMap outside the release namespace.
func deployAttackGatewayReadsSecret(t *testing.T, e *Env, r *deployRelease) {
	ctx := context.Background()
	accounts := releaseAccounts(t, e, r)
	victim := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{GenerateName: "nn-e2e-victim-keys-",
		Labels: map[string]string{v1alpha1.APIKeysSecretLabel: "true"}}, StringData: map[string]string{"k": "sk-e2e-victim"}}
	victim, err := e.Kube.CoreV1().Secrets(r.exampleNS).Create(ctx, victim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Kube.CoreV1().Secrets(r.exampleNS).Delete(context.Background(), victim.Name, metav1.DeleteOptions{})
	})
	gw := impersonate(t, e, accounts["gateway"], nil)
	for _, ns := range []string{r.exampleNS, r.namespace} {
		for _, verb := range []string{"get", "list", "watch"} {
			rev, err := gw.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
				Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
					Namespace: ns, Verb: verb, Resource: "secrets"}}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if rev.Status.Allowed {
				t.Errorf("kubectl auth can-i %s secrets -n %s --as %s: yes, want no", verb, ns, accounts["gateway"])
			}
		}
	}
	_, err = gw.CoreV1().Secrets(r.exampleNS).Get(ctx, victim.Name, metav1.GetOptions{})
	wantForbidden(t, err)
	// What the gateway reads instead: the controller's ConfigMap in the release namespace, with
	// the key's SHA-256 and never the key.
	e.Apply(t, r.exampleNS, fmt.Sprintf(`apiVersion: neuronetes.io/v1alpha1
kind: Tenant
metadata: {name: nn-e2e-victim}
spec:
  apiKeys: [{secretName: %s}]
  models: ["*"]
`, victim.Name))
	t.Cleanup(func() { e.Kubectl(t, "-n", r.exampleNS, "delete", "tenant", "nn-e2e-victim", "--ignore-not-found") })
	cmName := apikeyhash.ConfigMapName(r.exampleNS)
	Eventually(t, time.Minute, "the controller publishes the victim key's hash in "+r.namespace+"/"+cmName, func() (bool, error) {
		cm, err := gw.CoreV1().ConfigMaps(r.namespace).Get(ctx, cmName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if strings.Contains(fmt.Sprint(cm.Data), "sk-e2e-victim") {
			t.Fatalf("ConfigMap %s publishes the raw key: %v", cmName, cm.Data)
		}
		return strings.Contains(cm.Data[victim.Name], apikeyhash.Hash("sk-e2e-victim")), fmt.Errorf("data %v", cm.Data)
	})
	ctl := impersonate(t, e, accounts["controller"], nil)
	_, err = ctl.CoreV1().ConfigMaps(r.exampleNS).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "api-keys." + r.exampleNS}}, metav1.CreateOptions{})
	wantRefused(t, err, "only ConfigMaps named autoscaler-state.<pool>")
}

// wantForbidden fails unless err is an RBAC (or admission) Forbidden.
func wantForbidden(t *testing.T, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err = %v; want Forbidden", err)
	}
}

// wantRefused fails unless err is a refusal whose message contains want.
func wantRefused(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("write allowed; want refused with %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v; want a refusal containing %q", err, want)
	}
}
