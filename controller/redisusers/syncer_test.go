package redisusers

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

const secretName = "neuronetes-sidecar-redis"

// startRedis runs a redis-server whose default user is off, with the
// controller's user (ACLRules, password "ctl") and an admin for the test.
func startRedis(t *testing.T) (addr string, admin, ctl *redis.Client) {
	t.Helper()
	args := append([]string{"--user", DefaultUser, "on", ">ctl"}, ACLRules()...)
	args = append(args, "--user", "admin", "on", ">adm", "~*", "&*", "+@all", "--user", "default", "off")
	srv := redistest.Start(t, redistest.Options{Args: args})
	admin = as(t, srv.Addr, "admin", "adm")
	ctl = as(t, srv.Addr, DefaultUser, "ctl")
	return srv.Addr, admin, ctl
}

func as(t *testing.T, addr, user, pw string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pw, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

func pool(ns, name, class string) *nnv1.AgentPool {
	p := &nnv1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if class != "" {
		p.Spec.AgentClassRef = &nnv1.LocalObjectReference{Name: class}
	}
	return p
}

func newSyncer(t *testing.T, ctl *redis.Client, objs ...client.Object) (*Syncer, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := nnv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return &Syncer{Client: c, Secrets: c, Redis: ctl, SecretName: secretName}, c
}

func secretOf(t *testing.T, c client.Client, ns string) (*corev1.Secret, error) {
	t.Helper()
	var s corev1.Secret
	err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: secretName}, &s)
	return &s, err
}

func wantNoPerm(t *testing.T, c *redis.Client, who string, cmds ...[]any) {
	t.Helper()
	for _, cmd := range cmds {
		if err := c.Do(context.Background(), cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%v as %s = %v, want NOPERM", cmd, who, err)
		}
	}
}

// TestSyncIsolatesNamespaces gives each namespace with an AgentPool a
// Secret and a Redis user: team-a's user works on its own keys and gets
// NOPERM on team-b's, on FLUSHALL, KEYS and CONFIG, and team-b's session is
// unchanged; a class with the sidecar off gets no user; the controller's own
// user reads no key.
func TestSyncIsolatesNamespaces(t *testing.T) {
	addr, admin, ctl := startRedis(t)
	off := &nnv1.AgentClass{ObjectMeta: metav1.ObjectMeta{Namespace: "team-c", Name: "nosidecar"},
		Spec: nnv1.AgentClassSpec{Sidecar: &nnv1.SidecarConfig{Inject: ptr.To(false)}}}
	s, c := newSyncer(t, ctl, pool("team-a", "p", ""), pool("team-b", "p", ""), pool("team-c", "p", "nosidecar"), off)
	ctx := context.Background()
	if err := s.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	victim := "nn:{team-b}:sess:c"
	if err := admin.HSet(ctx, victim, "v", "1", "d", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	sec, err := secretOf(t, c, "team-a")
	if err != nil {
		t.Fatalf("team-a Secret: %v", err)
	}
	if sec.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController || string(sec.Data[UsernameKey]) != "sidecar:team-a" || len(sec.Data[PasswordKey]) < minPasswordLen {
		t.Fatalf("team-a Secret = %v %q, want labelled, user sidecar:team-a and a password", sec.Labels, sec.Data[UsernameKey])
	}
	if _, err := secretOf(t, c, "team-c"); !apierrors.IsNotFound(err) {
		t.Errorf("team-c (sidecar off) Secret: %v, want NotFound", err)
	}
	a := as(t, addr, string(sec.Data[UsernameKey]), string(sec.Data[PasswordKey]))
	if err := a.HSet(ctx, "nn:{team-a}:sess:c", "v", "1").Err(); err != nil {
		t.Fatalf("team-a's user on its own keys: %v", err)
	}
	wantNoPerm(t, a, "team-a's user",
		[]any{"HGETALL", victim}, []any{"HSET", victim, "d", "forged"}, []any{"DEL", victim},
		[]any{"FLUSHALL"}, []any{"KEYS", "*"}, []any{"CONFIG", "GET", "*"}, []any{"SUBSCRIBE", "nn:{team-b}:inval"})
	if got := admin.HGet(ctx, victim, "d").Val(); got != "secret" {
		t.Errorf("team-b's session = %q, want it unchanged", got)
	}
	wantNoPerm(t, ctl, "the controller's user", []any{"HGETALL", victim}, []any{"FLUSHALL"})
	if err := admin.Do(ctx, "ACL", "GETUSER", "sidecar:team-c").Err(); err != redis.Nil {
		t.Errorf("ACL GETUSER sidecar:team-c = %v, want no such user", err)
	}
}

// TestSyncRestoresAndRemoves re-applies a user Redis lost (a restart) with
// the Secret's password, removes the user and Secret of a namespace whose
// last AgentPool is gone, and leaves a Secret it does not manage alone.
func TestSyncRestoresAndRemoves(t *testing.T) {
	addr, admin, ctl := startRedis(t)
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team-d", Name: secretName},
		Data: map[string][]byte{UsernameKey: []byte("neuronetes-gateway"), PasswordKey: []byte("guess")}}
	s, c := newSyncer(t, ctl, pool("team-a", "p", ""), pool("team-b", "p", ""), pool("team-d", "p", ""), foreign)
	ctx := context.Background()
	if err := s.Sync(ctx); err == nil || !strings.Contains(err.Error(), "without the label") {
		t.Fatalf("Sync with an unmanaged Secret = %v, want it named", err)
	}
	if got, _ := secretOf(t, c, "team-d"); string(got.Data[PasswordKey]) != "guess" {
		t.Errorf("unmanaged Secret changed: %q", got.Data)
	}
	if err := admin.Do(ctx, "ACL", "GETUSER", "sidecar:team-d").Err(); err != redis.Nil {
		t.Errorf("user of the namespace with an unmanaged Secret: %v, want none", err)
	}

	sec, _ := secretOf(t, c, "team-a")
	if err := admin.Do(ctx, "ACL", "DELUSER", "sidecar:team-a").Err(); err != nil { // as after a restart
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil && !strings.Contains(err.Error(), "team-d") {
		t.Fatalf("Sync: %v", err)
	}
	if err := as(t, addr, "sidecar:team-a", string(sec.Data[PasswordKey])).Ping(ctx).Err(); err != nil {
		t.Errorf("team-a's user after Redis lost it: %v", err)
	}

	if err := c.Delete(ctx, pool("team-b", "p", "")); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil && !strings.Contains(err.Error(), "team-d") {
		t.Fatalf("Sync: %v", err)
	}
	if err := admin.Do(ctx, "ACL", "GETUSER", "sidecar:team-b").Err(); err != redis.Nil {
		t.Errorf("team-b's user after its pool went: %v, want removed", err)
	}
	if _, err := secretOf(t, c, "team-b"); !apierrors.IsNotFound(err) {
		t.Errorf("team-b's Secret after its pool went: %v, want NotFound", err)
	}
}
