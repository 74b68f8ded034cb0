package snapshot

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/neuronetes/neuronetes/checkpoint/container"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// fakeContainers records what ContainerdEngine.Checkpoint asks of container.Engine.
type fakeContainers struct {
	restored           string // the running container restored into the host, if any
	ckErr, rmErr       error
	dumped, removed    []string
	leaveRunningAtDump bool
}

func (f *fakeContainers) RestoredInto(_ context.Context, _ string) (string, bool, error) {
	return f.restored, f.restored != "", nil
}

func (f *fakeContainers) Checkpoint(_ context.Context, id string, k store.Key, ckID string, o container.CheckpointOptions) (*store.Manifest, error) {
	f.dumped = append(f.dumped, id)
	f.leaveRunningAtDump = o.LeaveRunning
	if f.ckErr != nil {
		return nil, f.ckErr
	}
	return &store.Manifest{Key: k, ID: ckID}, nil
}

func (f *fakeContainers) Remove(_ context.Context, id string) error {
	f.removed = append(f.removed, id)
	return f.rmErr
}

// TestCheckpointRemovesDumpedRestoredContainer: a restored container (a resumed session's agent)
// dumped without leave-running is removed from containerd once its checkpoint is stored; the
// host's own container, a leave-running dump and a failed dump are left alone.
func TestCheckpointRemovesDumpedRestoredContainer(t *testing.T) {
	tests := []struct {
		name         string
		restored     string
		leave        bool
		ckErr, rmErr error
		wantDumped   string
		wantRemoved  []string
		wantErr      bool
	}{
		{name: "restored container suspended", restored: "restored-1", wantDumped: "restored-1", wantRemoved: []string{"restored-1"}},
		{name: "remove fails: checkpoint still succeeds", restored: "restored-1", rmErr: errors.New("busy"), wantDumped: "restored-1", wantRemoved: []string{"restored-1"}},
		{name: "restored container left running", restored: "restored-1", leave: true, wantDumped: "restored-1"},
		{name: "dump fails: nothing removed", restored: "restored-1", ckErr: errors.New("criu"), wantDumped: "restored-1", wantErr: true},
		{name: "plain container (kubelet's own)", wantDumped: "host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeContainers{restored: tt.restored, ckErr: tt.ckErr, rmErr: tt.rmErr}
			e := &ContainerdEngine{ctrs: f}
			c := Container{Namespace: "ns", Pod: "s-2", Name: "agent", ID: "host"}
			m, err := e.Checkpoint(context.Background(), c, store.Key{Namespace: "ns", Agent: "session.s"}, "ns.s-2-suspend", tt.leave, nil)
			if (err != nil) != tt.wantErr || (err == nil && m == nil) {
				t.Fatalf("Checkpoint = %v, %v; want error %v", m, err, tt.wantErr)
			}
			if len(f.dumped) != 1 || f.dumped[0] != tt.wantDumped || f.leaveRunningAtDump != tt.leave {
				t.Errorf("dumped %v (leave running %v), want [%s] (%v)", f.dumped, f.leaveRunningAtDump, tt.wantDumped, tt.leave)
			}
			if !slices.Equal(f.removed, tt.wantRemoved) {
				t.Errorf("removed %v, want %v", f.removed, tt.wantRemoved)
			}
		})
	}
}

// TestCheckpointRefusesForeignNamespace: the key's namespace must be the pod's; nothing is dumped.
func TestCheckpointRefusesForeignNamespace(t *testing.T) {
	f := &fakeContainers{restored: "restored-1"}
	e := &ContainerdEngine{ctrs: f}
	_, err := e.Checkpoint(context.Background(), Container{Namespace: "a", Pod: "p", ID: "host"}, store.Key{Namespace: "b", Agent: "x"}, "b.x", false, nil)
	if err == nil || len(f.dumped)+len(f.removed) != 0 {
		t.Fatalf("err %v, dumped %v, removed %v; want refused, nothing touched", err, f.dumped, f.removed)
	}
}
