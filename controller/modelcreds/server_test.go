package modelcreds

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

// identity is what the fake apiserver says about a token.
type identity struct {
	user     string
	audience string
	pod, uid string
	node     string
}

// fakeReviews answers TokenReviews from tokens, checking the audience asked for.
func fakeReviews(tokens map[string]identity) *kubefake.Clientset {
	cs := kubefake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rev := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		id, ok := tokens[rev.Spec.Token]
		out := rev.DeepCopy()
		if !ok || len(rev.Spec.Audiences) != 1 || rev.Spec.Audiences[0] != id.audience {
			out.Status = authnv1.TokenReviewStatus{Error: "invalid token"}
			return true, out, nil
		}
		extra := map[string]authnv1.ExtraValue{}
		if id.pod != "" {
			extra["authentication.kubernetes.io/pod-name"] = authnv1.ExtraValue{id.pod}
			extra["authentication.kubernetes.io/pod-uid"] = authnv1.ExtraValue{id.uid}
		}
		if id.node != "" {
			extra[NodeNameExtra] = authnv1.ExtraValue{id.node}
		}
		out.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{id.audience}, User: authnv1.UserInfo{Username: id.user, Extra: extra}}
		return true, out, nil
	})
	return cs
}

// TestServer: the endpoint answers the node agent's pod for a Model used on its node, and refuses
// (with a reason, a status and no credential in the body, counted by reason) a missing or foreign
// token, a token for another audience, another ServiceAccount's pod, a token whose pod is gone or
// runs on another node, a Model not used on the caller's node, a Model recreated since the
// caller saw it, and a copy not made for the Model's current UID.
func TestServer(t *testing.T) {
	const sysNS, agentSA = "nn-system", "nn-nodeagent"
	agentUser := "system:serviceaccount:" + sysNS + ":" + agentSA
	agentPod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: name, UID: types.UID("uid-pod-" + name)},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: agentSA}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	used := testModel("a", "used", true)
	unused := testModel("a", "unused", true)
	stale := testModel("a", "stale", true)
	user := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "worker", Annotations: map[string]string{PodModelAnnotation: "used"}},
		Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	user2 := user.DeepCopy()
	user2.Name, user2.Annotations = "worker2", map[string]string{PodModelAnnotation: "stale"}
	other := testPod("a", "intruder", "node-1", nil, nil, corev1.PodRunning)
	other.Spec.ServiceAccountName = "default"
	other.UID = "uid-intruder"
	copyOf := func(m *nnv1.Model, uid string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sysNS, Name: nnv1.ModelSourceSecretName(m.Namespace, m.Name),
			Labels: map[string]string{nnv1.ManagedByLabel: nnv1.ManagedByController, nnv1.ModelSourceLabel: "true"},
			Annotations: map[string]string{nnv1.ModelSourceNamespaceAnnotation: m.Namespace, nnv1.ModelSourceNameAnnotation: m.Name,
				nnv1.ModelSourceUIDAnnotation: uid, nnv1.ModelSourceSecretAnnotation: m.Spec.Source.SecretRef.Name}},
			Data: map[string][]byte{"accessKeyID": []byte("AK-" + m.Name), "secretAccessKey": []byte("SECRET-" + m.Name)}}
	}
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = nnv1.AddToScheme(s)
	objs := []client.Object{used, unused, stale, &user, user2, &other, agentPod("agent-1", "node-1"), agentPod("agent-2", "kwok-0"),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-0"}},
		copyOf(used, string(used.UID)), copyOf(unused, string(unused.UID)), copyOf(stale, "uid-earlier")}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).
		WithIndex(&corev1.Pod{}, "spec.nodeName", func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }).Build()
	aud := modelsrcapi.Audience
	tokens := map[string]identity{
		"agent-1":       {user: agentUser, audience: aud, pod: "agent-1", uid: "uid-pod-agent-1", node: "node-1"},
		"agent-2":       {user: agentUser, audience: aud, pod: "agent-2", uid: "uid-pod-agent-2", node: "kwok-0"},
		"api-audience":  {user: agentUser, audience: "https://kubernetes.default.svc", pod: "agent-1", uid: "uid-pod-agent-1", node: "node-1"},
		"intruder":      {user: "system:serviceaccount:a:default", audience: aud, pod: "intruder", uid: "uid-intruder", node: "node-1"},
		"no-pod":        {user: agentUser, audience: aud},
		"gone-pod":      {user: agentUser, audience: aud, pod: "agent-9", uid: "uid-pod-agent-9", node: "node-1"},
		"lying-node":    {user: agentUser, audience: aud, pod: "agent-2", uid: "uid-pod-agent-2", node: "node-1"},
		"earlier-agent": {user: agentUser, audience: aud, pod: "agent-1", uid: "uid-old", node: "node-1"},
	}
	reg := prometheus.NewRegistry()
	srv := &Server{Reviews: fakeReviews(tokens).AuthenticationV1().TokenReviews(), Live: c, Cached: c, Namespace: sysNS,
		NodeAgent: sysNS + "/" + agentSA, Requests: NewRequestsMetric(reg)}
	for _, tc := range []struct {
		name, token, body string
		status            int
		reason            string
	}{
		{"used on the caller's node", "agent-1", `{"namespace":"a","name":"used","uid":"uid-used"}`, 200, ""},
		{"used, no UID given", "agent-1", `{"namespace":"a","name":"used"}`, 200, ""},
		{"not used on the caller's node", "agent-1", `{"namespace":"a","name":"unused"}`, 403, modelsrcapi.ReasonNotUsedOnNode},
		{"another node's agent", "agent-2", `{"namespace":"a","name":"used"}`, 403, modelsrcapi.ReasonNotUsedOnNode},
		{"no token", "", `{"namespace":"a","name":"used"}`, 401, modelsrcapi.ReasonUnauthenticated},
		{"unknown token", "forged", `{"namespace":"a","name":"used"}`, 401, modelsrcapi.ReasonUnauthenticated},
		{"token for the apiserver's audience", "api-audience", `{"namespace":"a","name":"used"}`, 401, modelsrcapi.ReasonUnauthenticated},
		{"another ServiceAccount's pod on the node", "intruder", `{"namespace":"a","name":"used"}`, 403, modelsrcapi.ReasonNotNodeAgent},
		{"token not bound to a pod", "no-pod", `{"namespace":"a","name":"used"}`, 401, modelsrcapi.ReasonUnauthenticated},
		{"pod gone", "gone-pod", `{"namespace":"a","name":"used"}`, 401, modelsrcapi.ReasonUnauthenticated},
		{"node claim not the pod's node", "lying-node", `{"namespace":"a","name":"used"}`, 401, modelsrcapi.ReasonUnauthenticated},
		{"token of an earlier pod of that name", "earlier-agent", `{"namespace":"a","name":"used"}`, 401, modelsrcapi.ReasonUnauthenticated},
		{"Model recreated since seen", "agent-1", `{"namespace":"a","name":"used","uid":"uid-before"}`, 404, modelsrcapi.ReasonModelNotFound},
		{"no such Model", "agent-1", `{"namespace":"a","name":"nope"}`, 404, modelsrcapi.ReasonModelNotFound},
		{"copy of an earlier Model", "agent-1", `{"namespace":"a","name":"stale"}`, 409, modelsrcapi.ReasonNotReady},
		{"bad body", "agent-1", `{"name":"used"}`, 400, modelsrcapi.ReasonBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, modelsrcapi.Path, strings.NewReader(tc.body))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != tc.status {
				t.Fatalf("status %d %s, want %d", rec.Code, body, tc.status)
			}
			if tc.status == 200 {
				var got modelsrcapi.Credentials
				if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.AccessKeyID != "AK-used" || got.SecretAccessKey != "SECRET-used" {
					t.Fatalf("credentials %+v (%v), want the copy's", got, err)
				}
				return
			}
			var rf modelsrcapi.Refusal
			if err := json.Unmarshal(rec.Body.Bytes(), &rf); err != nil || rf.Reason != tc.reason || rf.Message == "" {
				t.Fatalf("refusal %s (%v), want reason %s", body, err, tc.reason)
			}
			if strings.Contains(body, "SECRET") || strings.Contains(body, "AK-") {
				t.Fatalf("a refusal carries credentials: %s", body)
			}
		})
	}
	if got := testutil.ToFloat64(srv.Requests.WithLabelValues(modelsrcapi.ReasonNotUsedOnNode)); got != 2 {
		t.Errorf("NotUsedOnNode refusals counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(srv.Requests.WithLabelValues(ResultServed)); got != 2 {
		t.Errorf("served counted %v, want 2", got)
	}
}
