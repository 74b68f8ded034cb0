package scaleloop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// StateVersion is the format version of a persisted autoscaler state.
const StateVersion = 1

// ConfigMap keys and labels of a persisted state.
const (
	stateKey       = "state.json.zst"
	checksumKey    = "checksum"
	versionKey     = "version"
	stateComponent = "autoscaler-state"
	// maxStateBytes keeps a state ConfigMap under the apiserver's 1 MiB object limit.
	maxStateBytes = 900 << 10
)

// PoolState is what the autoscaler persists of one pool: its decision history, its cost meter
// (the day's spend) and the spec.replicas it left, so a restart or a leader change resumes
// stabilization, cooldown, the forecaster and the daily budget instead of starting over.
type PoolState struct {
	// Version is StateVersion.
	Version int `json:"version"`
	// PoolUID ties the state to one pool object: a pool deleted and created again starts afresh.
	PoolUID types.UID `json:"poolUID"`
	// SavedAt is when the state was written.
	SavedAt time.Time `json:"savedAt"`
	// Replicas is spec.replicas as the loop left it.
	Replicas int32 `json:"replicas"`
	// Autoscaler is the decision history.
	Autoscaler scalepolicy.State `json:"autoscaler"`
	// Meter is the cost meter.
	Meter scalepolicy.MeterState `json:"meter"`
}

// StateStore loads and saves PoolStates.
type StateStore interface {
	// Load returns the pool's saved state, or nil when there is none.
	Load(ctx context.Context, pool *v1alpha1.AgentPool) (*PoolState, error)
	// Save writes the pool's state.
	Save(ctx context.Context, pool *v1alpha1.AgentPool, s *PoolState) error
}

// ConfigMapStore keeps each pool's state in a ConfigMap "autoscaler-state.<pool>" of its
// namespace, owned by the pool (deleted with it): the JSON compressed with zstd, its SHA-256 and
// the format version. Only the leader's loop writes; a write carries the resourceVersion last
// read or written, so a deposed leader's late write fails instead of overwriting its successor's.
type ConfigMapStore struct {
	// Client writes ConfigMaps.
	Client client.Client
	// Reader reads them, bypassing the cache (ConfigMaps are not cached); nil means Client.
	Reader client.Reader

	mu sync.Mutex
	rv map[types.NamespacedName]string // the resourceVersion last read or written, per ConfigMap
}

// StateConfigMapName is the name of a pool's state ConfigMap.
func StateConfigMapName(pool string) string {
	name := "autoscaler-state." + pool
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(pool))
		name = "autoscaler-state." + hex.EncodeToString(sum[:16])
	}
	return name
}

// Load implements StateStore. A ConfigMap whose checksum or version does not match is an error
// naming it (the loop then starts afresh and overwrites it).
func (s *ConfigMapStore) Load(ctx context.Context, pool *v1alpha1.AgentPool) (*PoolState, error) {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: StateConfigMapName(pool.Name)}
	var cm corev1.ConfigMap
	if err := s.reader().Get(ctx, key, &cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get configmap %s: %w", key, err)
	}
	s.remember(key, cm.ResourceVersion)
	st, err := decodeState(&cm)
	if err != nil {
		return nil, fmt.Errorf("configmap %s: %w", key, err)
	}
	if st.PoolUID != pool.UID {
		return nil, nil
	}
	return st, nil
}

// Save implements StateStore.
func (s *ConfigMapStore) Save(ctx context.Context, pool *v1alpha1.AgentPool, st *PoolState) error {
	key := types.NamespacedName{Namespace: pool.Namespace, Name: StateConfigMapName(pool.Name)}
	cm, err := encodeState(st)
	if err != nil {
		return err
	}
	cm.Name, cm.Namespace = key.Name, key.Namespace
	cm.Labels = map[string]string{v1alpha1.PoolLabel: pool.Name, "app.kubernetes.io/component": stateComponent}
	yes := true
	cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: v1alpha1.AgentPoolKind,
		Name: pool.Name, UID: pool.UID, BlockOwnerDeletion: &yes}}
	rv, known := s.version(key)
	if !known {
		if err := s.Client.Create(ctx, cm); err == nil {
			s.remember(key, cm.ResourceVersion)
			return nil
		} else if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create configmap %s: %w", key, err)
		}
		// Written since this process last looked: read its version, then overwrite below.
		var cur corev1.ConfigMap
		if err := s.reader().Get(ctx, key, &cur); err != nil {
			return fmt.Errorf("get configmap %s: %w", key, err)
		}
		rv = cur.ResourceVersion
	}
	cm.ResourceVersion = rv
	if err := s.Client.Update(ctx, cm); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			s.forget(key) // another writer (a newer leader) or a deletion: re-read before the next write
		}
		return fmt.Errorf("update configmap %s: %w", key, err)
	}
	s.remember(key, cm.ResourceVersion)
	return nil
}

func (s *ConfigMapStore) reader() client.Reader {
	if s.Reader != nil {
		return s.Reader
	}
	return s.Client
}

func (s *ConfigMapStore) version(key types.NamespacedName) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rv, ok := s.rv[key]
	return rv, ok
}

func (s *ConfigMapStore) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rv, key)
}

func (s *ConfigMapStore) remember(key types.NamespacedName, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rv == nil {
		s.rv = map[types.NamespacedName]string{}
	}
	s.rv[key] = rv
}

// encodeState renders st as a ConfigMap's data. Forecaster buckets are dropped oldest first if
// the state would not fit one object.
func encodeState(st *PoolState) (*corev1.ConfigMap, error) {
	for {
		raw, err := json.Marshal(st)
		if err != nil {
			return nil, fmt.Errorf("encode autoscaler state: %w", err)
		}
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			return nil, err
		}
		z := enc.EncodeAll(raw, nil)
		_ = enc.Close()
		if f := st.Autoscaler.Forecast; len(z) > maxStateBytes && f != nil && len(f.Buckets) > 0 {
			f.Buckets = f.Buckets[len(f.Buckets)/4+1:]
			continue
		}
		if len(z) > maxStateBytes {
			return nil, fmt.Errorf("autoscaler state of %d bytes compressed exceeds %d", len(z), maxStateBytes)
		}
		sum := sha256.Sum256(z)
		return &corev1.ConfigMap{
			Data:       map[string]string{versionKey: fmt.Sprint(StateVersion), checksumKey: "sha256:" + hex.EncodeToString(sum[:])},
			BinaryData: map[string][]byte{stateKey: z},
		}, nil
	}
}

// decodeState checks and decodes a state ConfigMap.
func decodeState(cm *corev1.ConfigMap) (*PoolState, error) {
	if v := cm.Data[versionKey]; v != fmt.Sprint(StateVersion) {
		return nil, fmt.Errorf("%s %q: want %d", versionKey, v, StateVersion)
	}
	z := cm.BinaryData[stateKey]
	sum := sha256.Sum256(z)
	if want := "sha256:" + hex.EncodeToString(sum[:]); cm.Data[checksumKey] != want {
		return nil, fmt.Errorf("%s %q does not match the state (%s)", checksumKey, cm.Data[checksumKey], want)
	}
	dec, err := zstd.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	raw, err := io.ReadAll(io.LimitReader(dec, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", stateKey, err)
	}
	var st PoolState
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("decode %s: %w", stateKey, err)
	}
	if st.Version != StateVersion {
		return nil, fmt.Errorf("state version %d: want %d", st.Version, StateVersion)
	}
	return &st, nil
}

// DefaultPersistInterval is Loop.PersistInterval's default.
const DefaultPersistInterval = 30 * time.Second

// load reads the pool's persisted state once per process: the meter and the replicas it left
// are restored at once, the decision history when the Autoscaler is built.
func (l *Loop) load(ctx context.Context, pool *v1alpha1.AgentPool, st *poolState) {
	st.loaded = true
	if l.State == nil {
		return
	}
	logger := klog.FromContext(ctx)
	ps, err := l.State.Load(ctx, pool)
	if err != nil {
		logger.Error(err, "Autoscaler state not restored; starting afresh")
		return
	}
	if ps == nil {
		return
	}
	st.meter.Restore(ps.Meter)
	st.restored = &ps.Autoscaler
	st.seen = seen{known: true, replicas: ps.Replicas}
	logger.Info("Autoscaler state restored", "savedAt", ps.SavedAt, "replicas", ps.Replicas,
		"spentToday", ps.Meter.Spent, "recommendations", len(ps.Autoscaler.Recs))
}

// persist saves the pool's state when a decision changed the replicas, or when the last save is
// PersistInterval old.
func (l *Loop) persist(ctx context.Context, pool *v1alpha1.AgentPool, st *poolState, changed bool) {
	if l.State == nil || st.a == nil {
		return
	}
	every := l.PersistInterval
	if every <= 0 {
		every = DefaultPersistInterval
	}
	now := l.now()
	if !changed && !st.saved.IsZero() && now.Sub(st.saved) < every {
		return
	}
	ps := &PoolState{Version: StateVersion, PoolUID: pool.UID, SavedAt: now, Replicas: st.seen.replicas,
		Autoscaler: st.a.Snapshot(), Meter: st.meter.Snapshot()}
	if err := l.State.Save(ctx, pool, ps); err != nil {
		klog.FromContext(ctx).Error(err, "Autoscaler state not saved")
		return
	}
	st.saved = now
}
