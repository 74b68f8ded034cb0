package redisusers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/redisconn"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

// DefaultPeriod is how often the Syncer checks that every user exists in Redis (and so restores
// them after a Redis restart); every SecretEvery-th round it also re-reads every Secret.
const (
	DefaultPeriod = 10 * time.Second
	SecretEvery   = 30
)

// Syncer keeps the namespaces' Secrets and Redis users. It runs on the leader only.
type Syncer struct {
	// Client lists AgentPools and reads AgentClasses (the manager's cache) and writes Secrets.
	Client client.Client
	// Secrets reads Secrets by name from the apiserver (no cache: the controller may get only
	// Secrets named SecretName, not list them).
	Secrets client.Reader
	// Redis is the controller's connection, as a user with ACLRules.
	Redis redis.UniversalClient
	// SecretName is the Secret of each namespace (the webhook's --sidecar-redis-secret).
	SecretName string
	// Namespace limits the Syncer to one namespace ("" all).
	Namespace string
	// Period between rounds (default DefaultPeriod).
	Period time.Duration

	mu        sync.Mutex
	passwords map[string]string // namespace -> password applied to Redis
	round     int
	kick      chan struct{}
}

// SetupWithManager runs the Syncer under mgr and starts a round whenever an AgentPool appears or
// disappears.
func (s *Syncer) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	inf, err := mgr.GetCache().GetInformer(ctx, &nnv1.AgentPool{})
	if err != nil {
		return fmt.Errorf("redis users: agentpool informer: %w", err)
	}
	kick := func(any) { s.Kick() }
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: kick, DeleteFunc: kick}); err != nil {
		return fmt.Errorf("redis users: agentpool handler: %w", err)
	}
	return mgr.Add(s)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: one writer.
func (s *Syncer) NeedLeaderElection() bool { return true }

func (s *Syncer) kickCh() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kick == nil {
		s.kick = make(chan struct{}, 1)
	}
	return s.kick
}

// Kick asks for a round now.
func (s *Syncer) Kick() {
	select {
	case s.kickCh() <- struct{}{}:
	default:
	}
}

// Start implements manager.Runnable: a round at start, on every Kick and every Period.
func (s *Syncer) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("redis-users")
	period := s.Period
	if period <= 0 {
		period = DefaultPeriod
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := s.Sync(ctx); err != nil {
			log.Error(err, "Redis users not in sync; retrying")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kickCh():
		}
	}
}

// Sync runs one round: every namespace that needs a user gets its Secret and its Redis user (a
// user missing from Redis, a namespace not seen before and, every SecretEvery-th round, all of
// them are re-read and re-applied); users of namespaces that no longer need one are deleted with
// their Secret.
func (s *Syncer) Sync(ctx context.Context) error {
	want, err := s.wanted(ctx)
	if err != nil {
		return err
	}
	users, err := s.Redis.Do(ctx, "ACL", "USERS").StringSlice()
	if err != nil {
		return fmt.Errorf("ACL USERS: %w", err)
	}
	have := map[string]bool{}
	for _, u := range users {
		have[u] = true
	}
	s.mu.Lock()
	if s.passwords == nil {
		s.passwords = map[string]string{}
	}
	full := s.round%SecretEvery == 0
	s.round++
	s.mu.Unlock()
	var errs []error
	for ns := range want {
		if err := s.ensure(ctx, ns, full || !have[UserName(ns)]); err != nil {
			errs = append(errs, err)
		}
	}
	for _, u := range users {
		ns, ok := strings.CutPrefix(u, UserPrefix)
		if !ok || want[ns] || (s.Namespace != "" && ns != s.Namespace) {
			continue
		}
		if err := s.remove(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// wanted are the namespaces with an AgentPool whose AgentClass does not turn the sidecar off (a
// class not found yet counts as injecting, as the webhook's default does).
func (s *Syncer) wanted(ctx context.Context) (map[string]bool, error) {
	var pools nnv1.AgentPoolList
	if err := s.Client.List(ctx, &pools, client.InNamespace(s.Namespace)); err != nil {
		return nil, fmt.Errorf("list agentpools: %w", err)
	}
	want := map[string]bool{}
	for _, p := range pools.Items {
		if want[p.Namespace] || !p.DeletionTimestamp.IsZero() {
			continue
		}
		class := p.Name
		if p.Spec.AgentClassRef != nil && p.Spec.AgentClassRef.Name != "" {
			class = p.Spec.AgentClassRef.Name
		}
		var ac nnv1.AgentClass
		err := s.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: class}, &ac)
		if err == nil && ac.Spec.Sidecar != nil && ac.Spec.Sidecar.Inject != nil && !*ac.Spec.Sidecar.Inject {
			continue
		}
		want[p.Namespace] = true
	}
	return want, nil
}

// ensure makes ns's Secret and Redis user exist; reread reads the Secret again and re-applies
// the user even when this process applied it before.
func (s *Syncer) ensure(ctx context.Context, ns string, reread bool) error {
	s.mu.Lock()
	pw, known := s.passwords[ns]
	s.mu.Unlock()
	if known && !reread {
		return nil
	}
	pw, err := s.ensureSecret(ctx, ns)
	if err != nil {
		return err
	}
	if err := redisconn.SetUser(ctx, s.Redis, UserName(ns), pw, store.ACLRules(ns)); err != nil {
		return err
	}
	s.mu.Lock()
	s.passwords[ns] = pw
	s.mu.Unlock()
	if !known {
		klog.FromContext(ctx).V(2).Info("Redis user applied", "namespace", ns, "user", UserName(ns))
	}
	return nil
}

// ensureSecret returns the password of ns's Secret, creating the Secret, or completing one the
// controller manages, as needed.
func (s *Syncer) ensureSecret(ctx context.Context, ns string) (string, error) {
	var sec corev1.Secret
	err := s.Secrets.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.SecretName}, &sec)
	if apierrors.IsNotFound(err) {
		pw, err := newPassword()
		if err != nil {
			return "", err
		}
		sec = corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.SecretName, Labels: map[string]string{nnv1.ManagedByLabel: nnv1.ManagedByController}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{UsernameKey: []byte(UserName(ns)), PasswordKey: []byte(pw)},
		}
		if err := s.Client.Create(ctx, &sec); err != nil {
			return "", fmt.Errorf("create secret %s/%s: %w", ns, s.SecretName, err)
		}
		return pw, nil
	}
	if err != nil {
		return "", fmt.Errorf("get secret %s/%s: %w", ns, s.SecretName, err)
	}
	if sec.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController {
		return "", fmt.Errorf("secret %s/%s exists without the label %s=%s: not the controller's, left alone (delete it or label it)", ns, s.SecretName, nnv1.ManagedByLabel, nnv1.ManagedByController)
	}
	pw := string(sec.Data[PasswordKey])
	if len(pw) >= minPasswordLen && string(sec.Data[UsernameKey]) == UserName(ns) {
		return pw, nil
	}
	if len(pw) < minPasswordLen {
		if pw, err = newPassword(); err != nil {
			return "", err
		}
	}
	sec.Data = map[string][]byte{UsernameKey: []byte(UserName(ns)), PasswordKey: []byte(pw)}
	if err := s.Client.Update(ctx, &sec); err != nil {
		return "", fmt.Errorf("update secret %s/%s: %w", ns, s.SecretName, err)
	}
	return pw, nil
}

// remove deletes ns's Redis user and its Secret when the controller manages it.
func (s *Syncer) remove(ctx context.Context, ns string) error {
	if err := s.Redis.Do(ctx, "ACL", "DELUSER", UserName(ns)).Err(); err != nil {
		return fmt.Errorf("ACL DELUSER %s: %w", UserName(ns), err)
	}
	s.mu.Lock()
	delete(s.passwords, ns)
	s.mu.Unlock()
	var sec corev1.Secret
	err := s.Secrets.Get(ctx, types.NamespacedName{Namespace: ns, Name: s.SecretName}, &sec)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get secret %s/%s: %w", ns, s.SecretName, err)
	}
	if sec.Labels[nnv1.ManagedByLabel] != nnv1.ManagedByController {
		return nil
	}
	if err := s.Client.Delete(ctx, &sec, client.Preconditions{UID: &sec.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete secret %s/%s: %w", ns, s.SecretName, err)
	}
	klog.FromContext(ctx).V(2).Info("Redis user removed", "namespace", ns, "user", UserName(ns))
	return nil
}
