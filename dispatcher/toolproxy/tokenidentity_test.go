package toolproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlfake "sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// issued is what the fake apiserver knows of a token it signed.
type issued struct {
	ns, sa, pod, uid string
	aud              []string
}

// fakeAPIServer mints ServiceAccount tokens and answers TokenReviews as the apiserver does:
// a token it did not sign, or whose audiences do not meet the review's, is not authenticated;
// a bound token names its pod in the user's extra.
type fakeAPIServer struct {
	t   *testing.T
	key *ecdsa.PrivateKey
	now func() time.Time

	mu      sync.Mutex
	tokens  map[string]issued
	reviews []authnv1.TokenReviewSpec
	fail    error
}

func newFakeAPIServer(t *testing.T, now func() time.Time) *fakeAPIServer {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeAPIServer{t: t, key: k, now: now, tokens: map[string]issued{}}
}

// mint signs a token with key (the fake apiserver's when nil, then also remembered as issued).
func (f *fakeAPIServer) mint(in issued, ttl time.Duration, key *ecdsa.PrivateKey) string {
	k := key
	if k == nil {
		k = f.key
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	now := f.now()
	tok, err := jwt.Signed(sig).Claims(jwt.Claims{Subject: "system:serviceaccount:" + in.ns + ":" + in.sa, Audience: in.aud,
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(ttl)), ID: in.pod + in.uid + ttl.String()}).Serialize()
	if err != nil {
		f.t.Fatal(err)
	}
	if key == nil {
		f.mu.Lock()
		f.tokens[tok] = in
		f.mu.Unlock()
	}
	return tok
}

func (f *fakeAPIServer) react(a k8stesting.Action) (bool, runtime.Object, error) {
	tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews = append(f.reviews, tr.Spec)
	if f.fail != nil {
		return true, nil, f.fail
	}
	in, ok := f.tokens[tr.Spec.Token]
	if !ok {
		tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		return true, tr, nil
	}
	var auds []string
	for _, want := range tr.Spec.Audiences {
		for _, has := range in.aud {
			if want == has {
				auds = append(auds, want)
			}
		}
	}
	if len(auds) == 0 {
		tr.Status = authnv1.TokenReviewStatus{Error: "token audiences are invalid for the target audiences"}
		return true, tr, nil
	}
	u := authnv1.UserInfo{Username: "system:serviceaccount:" + in.ns + ":" + in.sa}
	if in.pod != "" {
		u.Extra = map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {in.pod}, "authentication.kubernetes.io/pod-uid": {in.uid}}
	}
	tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: auds, User: u}
	return true, tr, nil
}

func (f *fakeAPIServer) reviewCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reviews)
}

func agentPod(ns, name, uid string, owner *v1alpha1.AgentPool, label string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Labels: map[string]string{v1alpha1.PoolLabel: label}},
		Spec: corev1.PodSpec{ServiceAccountName: "default"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentPool", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
	}
	return p
}

// sessionPod is a pod controlled by session (nil: none), labelled neuronetes.io/session=label,
// running as the session's ServiceAccount.
func sessionPod(ns, name, uid string, session *v1alpha1.AgentSession, label string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid), Labels: map[string]string{v1alpha1.SessionLabel: label}},
		Spec: corev1.PodSpec{ServiceAccountName: "session-" + label}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if session != nil {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AgentSession", Name: session.Name, UID: session.UID, Controller: ptr.To(true)}}
	}
	return p
}

func agentSession(ns, name, uid, class string) *v1alpha1.AgentSession {
	return &v1alpha1.AgentSession{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec: v1alpha1.AgentSessionSpec{ClassRef: v1alpha1.LocalObjectReference{Name: class}}}
}

func agentPool(ns, name, uid string) *v1alpha1.AgentPool {
	return &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}}
}

// okInvoker answers every call, so that these tests depend on no network policy.
type okInvoker struct{ calls int }

func (o *okInvoker) Invoke(context.Context, *Tool, Caller, string, []byte) (Answer, error) {
	o.calls++
	return Answer{Status: 200, ContentType: "application/json", Body: []byte(`{"ok":true}`)}, nil
}

type identityFixture struct {
	api   *fakeAPIServer
	id    *TokenIdentity
	proxy *Proxy
	inv   *okInvoker
	audit *Audit
	now   time.Time
}

func newIdentityFixture(t *testing.T) *identityFixture {
	fx := &identityFixture{now: time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC), inv: &okInvoker{}, audit: &Audit{}}
	fx.api = newFakeAPIServer(t, func() time.Time { return fx.now })
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", fx.api.react)
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	agents, billing, otherAgents := agentPool("ns", "agents", "pool-a"), agentPool("ns", "billing", "pool-b"), agentPool("other", "agents", "pool-o")
	stale := agents.DeepCopy()
	stale.UID = "pool-a-deleted"
	done := agentPod("ns", "agents-9", "p9", agents, "agents")
	done.Status.Phase = corev1.PodSucceeded
	alice, bob, otherAlice := agentSession("ns", "alice", "s1", "chat"), agentSession("ns", "bob", "s2", "billing"), agentSession("other", "alice", "s3", "chat")
	staleAlice := alice.DeepCopy()
	staleAlice.UID = "s1-deleted"
	objs := []client.Object{agents, billing, otherAgents, done, alice, bob, otherAlice,
		sessionPod("ns", "alice-1", "q1", alice, "alice"),
		sessionPod("ns", "bob-1", "q2", bob, "alice"),               // labelled alice, controlled by bob (class billing)
		sessionPod("ns", "alice-spoof", "q3", nil, "alice"),         // the session label alone
		sessionPod("ns", "alice-forged", "q4", staleAlice, "alice"), // an owner reference to an earlier session
		sessionPod("other", "alice-1", "q5", otherAlice, "alice"),
		agentPod("ns", "agents-0", "p1", agents, "agents"),
		agentPod("ns", "billing-0", "p2", billing, "agents"), // labelled agents, controlled by billing
		agentPod("ns", "spoof", "p3", nil, "agents"),         // the label alone
		agentPod("ns", "forged", "p4", stale, "agents"),      // an owner reference to an earlier pool
		agentPod("other", "agents-0", "p5", otherAgents, "agents"),
	}
	c := ctrlfake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	fx.id = &TokenIdentity{Reviews: cs.AuthenticationV1().TokenReviews(), Reader: c, Now: func() time.Time { return fx.now }}
	reg := NewRegistry()
	reg.Update(toolBinding("weather", "http", "http://tool.example/forecast", v1alpha1.ToolConfig{AllowedSessionClasses: []string{"chat"}}))
	fx.proxy = &Proxy{Registry: reg, Invoker: fx.inv, Idem: &MemoryIdem{}, Audit: fx.audit, Identity: fx.id}
	return fx
}

func (fx *identityFixture) call(t *testing.T, token string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/tools/ns/weather", bytes.NewReader([]byte(`{}`)))
	req.RemoteAddr = "10.0.0.1:40000"
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	fx.proxy.ServeHTTP(rec, req)
	return rec
}

// TestTokenIdentity: only a token the apiserver authenticates for the tool proxy's audience,
// bound to a live pod that an existing AgentPool controls, is a caller, and its pool is that
// controller, whatever the pod's labels say. Every refusal is audited as refused_auth.
func TestTokenIdentity(t *testing.T) {
	fx := newIdentityFixture(t)
	aud := []string{v1alpha1.ToolProxyAudience}
	bound := func(ns, pod, uid string) issued { return issued{ns: ns, sa: "default", pod: pod, uid: uid, aud: aud} }
	sess := func(ns, pod, uid string) issued {
		return issued{ns: ns, sa: "session-alice", pod: pod, uid: uid, aud: aud}
	}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tc := range []struct {
		name    string
		token   func() string
		status  int
		code    string
		inBody  string
		pool    string // audited pool
		session string // audited session
	}{
		{"a label-only pod without a token", func() string { return "" }, 401, CodeUnknownCaller, "Authorization: Bearer", "", ""},
		{"not a JWT", func() string { return "hunter2" }, 401, CodeUnknownCaller, "not a ServiceAccount token", "", ""},
		{"the pod's apiserver token (wrong audience)", func() string {
			return fx.api.mint(issued{ns: "ns", sa: "default", pod: "agents-0", uid: "p1", aud: []string{"https://kubernetes.default.svc.cluster.local"}}, time.Hour, nil)
		}, 401, CodeUnknownCaller, "is not " + v1alpha1.ToolProxyAudience, "", ""},
		{"a token the apiserver did not sign", func() string { return fx.api.mint(bound("ns", "agents-0", "p1"), time.Hour, otherKey) }, 401, CodeUnknownCaller, "invalid bearer token", "", ""},
		{"an expired token", func() string { return fx.api.mint(bound("ns", "agents-0", "p1"), -time.Second, nil) }, 401, CodeUnknownCaller, "expired", "", ""},
		{"a token bound to no pod", func() string { return fx.api.mint(bound("ns", "", ""), time.Hour, nil) }, 401, CodeUnknownCaller, "not bound to a pod", "", ""},
		{"a token of an earlier pod of that name", func() string { return fx.api.mint(bound("ns", "agents-0", "p0"), time.Hour, nil) }, 401, CodeUnknownCaller, "earlier pod", "", ""},
		{"a token of a pod that is gone", func() string { return fx.api.mint(bound("ns", "agents-7", "p7"), time.Hour, nil) }, 401, CodeUnknownCaller, "no longer exists", "", ""},
		{"a labelled pod that no AgentPool controls", func() string { return fx.api.mint(bound("ns", "spoof", "p3"), time.Hour, nil) }, 403, CodeNotAgentPod, "not controlled by an AgentPool", "", ""},
		{"an owner reference to an earlier pool", func() string { return fx.api.mint(bound("ns", "forged", "p4"), time.Hour, nil) }, 403, CodeNotAgentPod, "earlier AgentPool", "", ""},
		{"a terminated pod", func() string { return fx.api.mint(bound("ns", "agents-9", "p9"), time.Hour, nil) }, 403, CodeNotAgentPod, "terminated", "", ""},
		{"a pod of another pool labelled as the allowed one", func() string { return fx.api.mint(bound("ns", "billing-0", "p2"), time.Hour, nil) }, 403, "forbidden_tool", "AgentPool billing may not call", "billing", ""},
		{"the allowed pool's pod in another namespace", func() string { return fx.api.mint(bound("other", "agents-0", "p5"), time.Hour, nil) }, 404, "tool_not_found", "", "agents", ""},
		{"the allowed pool's pod", func() string { return fx.api.mint(bound("ns", "agents-0", "p1"), time.Hour, nil) }, 200, "", `"ok":true`, "agents", ""},
		{"a session-labelled pod that no AgentSession controls", func() string { return fx.api.mint(sess("ns", "alice-spoof", "q3"), time.Hour, nil) }, 403, CodeNotAgentPod, "not controlled by an AgentPool or an AgentSession", "", ""},
		{"an owner reference to an earlier session", func() string { return fx.api.mint(sess("ns", "alice-forged", "q4"), time.Hour, nil) }, 403, CodeNotAgentPod, "earlier AgentSession", "", ""},
		{"a session of a class the tool does not allow, labelled as an allowed one", func() string { return fx.api.mint(sess("ns", "bob-1", "q2"), time.Hour, nil) }, 403, "forbidden_tool", "AgentSession bob (AgentClass billing) may not call", "", "bob"},
		{"the allowed session class in another namespace", func() string { return fx.api.mint(sess("other", "alice-1", "q5"), time.Hour, nil) }, 404, "tool_not_found", "", "", "alice"},
		{"the allowed session class's pod", func() string { return fx.api.mint(sess("ns", "alice-1", "q1"), time.Hour, nil) }, 200, "", `"ok":true`, "", "alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := fx.inv.calls
			rec := fx.call(t, tc.token())
			body := rec.Body.String()
			if rec.Code != tc.status || !strings.Contains(body, tc.inBody) || (tc.code != "" && !strings.Contains(body, `"code":"`+tc.code+`"`)) {
				t.Fatalf("status %d body %s; want %d, code %q, %q", rec.Code, body, tc.status, tc.code, tc.inBody)
			}
			if rec.Code == 401 && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("a 401 without a WWW-Authenticate challenge")
			}
			if called := fx.inv.calls > calls; called != (tc.status == 200) {
				t.Fatalf("tool called: %v", called)
			}
			es := fx.audit.Entries()
			e := es[len(es)-1]
			if tc.code == CodeNotAgentPod && !strings.HasPrefix(e.Pod, "ns/") {
				t.Errorf("audit entry of a refused pod names pod %q, want ns/<name>", e.Pod)
			}
			if e.Pool != tc.pool || e.Session != tc.session || (tc.status == 401 || tc.code == CodeNotAgentPod) != (e.Outcome == OutcomeRefusedAuth && e.Error == tc.code) {
				t.Fatalf("audit entry %+v", e)
			}
		})
	}
	for _, r := range fx.api.reviews {
		if len(r.Audiences) != 1 || r.Audiences[0] != v1alpha1.ToolProxyAudience {
			t.Fatalf("a TokenReview asked for audiences %q", r.Audiences)
		}
	}
}

// TestTokenIdentityCache: a verified token is reviewed once per TTL, never trusted past its
// expiry, the cache holds at most Size tokens, and an apiserver that cannot be asked is a 503
// that nothing caches.
func TestTokenIdentityCache(t *testing.T) {
	fx := newIdentityFixture(t)
	fx.id.TTL, fx.id.Size = 30*time.Second, 2
	bound := issued{ns: "ns", sa: "default", pod: "agents-0", uid: "p1", aud: []string{v1alpha1.ToolProxyAudience}}
	long := fx.api.mint(bound, time.Hour, nil)
	step := func(token string, wantStatus, wantReviews int) {
		t.Helper()
		if rec := fx.call(t, token); rec.Code != wantStatus {
			t.Fatalf("status %d %s, want %d", rec.Code, rec.Body, wantStatus)
		}
		if n := fx.api.reviewCount(); n != wantReviews {
			t.Fatalf("%d TokenReviews, want %d", n, wantReviews)
		}
	}
	step(long, 200, 1)
	step(long, 200, 1) // cached
	fx.now = fx.now.Add(31 * time.Second)
	step(long, 200, 2) // past the TTL: asked again
	short := fx.api.mint(bound, 10*time.Second, nil)
	step(short, 200, 3)
	fx.now = fx.now.Add(11 * time.Second)
	step(short, 401, 3) // expired: refused before any review, the cached entry notwithstanding
	// Size 2: a third token evicts the least recently used.
	a, b, c := fx.api.mint(bound, time.Hour, nil), fx.api.mint(bound, 2*time.Hour, nil), fx.api.mint(bound, 3*time.Hour, nil)
	step(a, 200, 4)
	step(b, 200, 5)
	step(c, 200, 6)
	step(a, 200, 7)
	fx.api.fail = errors.New("connection refused")
	d := fx.api.mint(bound, 4*time.Hour, nil)
	if rec := fx.call(t, d); rec.Code != 503 || !strings.Contains(rec.Body.String(), CodeIdentityUnavailable) {
		t.Fatalf("apiserver down: %d %s", rec.Code, rec.Body)
	}
	fx.api.fail = nil
	step(d, 200, 9) // the failure was not cached
}
