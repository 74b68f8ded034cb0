package nvml

import (
	"context"
	"errors"
	"fmt"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"
)

// EventKind classifies a health event.
type EventKind string

const (
	// EventXID is an XID error reported by the GPU.
	EventXID EventKind = "xid"
	// EventLost means the GPU fell off the bus or stopped answering.
	EventLost EventKind = "lost"
	// EventRecovered means the GPU is healthy again.
	EventRecovered EventKind = "recovered"
)

// Event is one health event of one GPU.
type Event struct {
	UUID string    `json:"uuid"`
	Kind EventKind `json:"kind"`
	XID  uint64    `json:"xid,omitempty"`
	Time time.Time `json:"time"`
}

// ErrGPULost reports that a GPU does not answer (NVML's ERROR_GPU_IS_LOST).
var ErrGPULost = errors.New("GPU is lost")

// Inject delivers a health event as if NVML had reported it. It is how tests and the debug endpoint
// simulate XIDs, lost GPUs and recovery, with real and mock backends alike. It never blocks: when the
// consumer is behind, the event is dropped and false is returned.
func (b *Backend) Inject(ev Event) bool {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	select {
	case b.events <- ev:
		return true
	default:
		return false
	}
}

// Events returns the channel of health events. For the real library, it also starts a goroutine
// that waits on an NVML event set for XID errors until ctx ends. There must be one consumer.
func (b *Backend) Events(ctx context.Context) <-chan Event {
	if b.mock == nil {
		go b.watchNVML(ctx)
	}
	return b.events
}

// Probe asks the GPU for something cheap (its memory info) and returns an error wrapping
// ErrGPULost when it does not answer. Real NVML never reports that a lost GPU is back, so the
// health monitor probes lost GPUs until they answer. A mock GPU is lost while SetLost says so.
func (b *Backend) Probe(ctx context.Context, uuid string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refreshLocked(); err != nil {
		return err
	}
	if b.mock != nil && b.mock.lost[uuid] {
		return fmt.Errorf("gpu %s: %w", uuid, ErrGPULost)
	}
	d, err := b.device(uuid)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrGPULost, err)
	}
	if _, ret := d.GetMemoryInfo(); ret != gonvml.SUCCESS {
		if ret == gonvml.ERROR_GPU_IS_LOST {
			return fmt.Errorf("gpu %s: %w", uuid, ErrGPULost)
		}
		return fmt.Errorf("gpu %s: memory info: %s", uuid, gonvml.ErrorString(ret))
	}
	return nil
}

// SetLost makes a mock GPU lost (Probe fails) or answer again; like the MIG state, this outlives
// the process when the mock persists its state. Real GPUs cannot be lost on purpose.
func (b *Backend) SetLost(uuid string, lost bool) error {
	if b.mock == nil {
		return errors.New("only a mock GPU can be made lost")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refreshLocked(); err != nil {
		return err
	}
	if lost {
		b.mock.lost[uuid] = true
	} else {
		delete(b.mock.lost, uuid)
	}
	if b.mock.file != "" {
		if err := b.mock.save(); err != nil {
			return fmt.Errorf("mock state: %w", err)
		}
	}
	return nil
}

// lostBackoff bounds the pause after an event wait that reports a lost GPU: a lost GPU makes
// every wait return at once, and the loop must not spin.
const (
	lostBackoffMin = time.Second
	lostBackoffMax = 30 * time.Second
)

// waitResult is one return of an NVML event wait.
type waitResult struct {
	uuid string // of the XID's device
	xid  uint64
	ret  gonvml.Return
}

// eventLoop turns event waits into health events. wait blocks up to a second; lostGPUs probes
// every GPU and returns the lost ones; sleep pauses (false when ctx ended). A wait that reports a
// lost GPU announces each newly lost GPU once, then backs off exponentially; any other result
// resets the backoff. Recovery is not its job: the health monitor probes lost GPUs.
func (b *Backend) eventLoop(ctx context.Context, wait func() waitResult, lostGPUs func() []string, sleep func(time.Duration) bool) {
	logger := klog.FromContext(ctx)
	backoff := lostBackoffMin
	announced := map[string]bool{}
	for ctx.Err() == nil {
		r := wait()
		switch r.ret {
		case gonvml.ERROR_GPU_IS_LOST:
			lost := lostGPUs()
			now := map[string]bool{}
			for _, u := range lost {
				now[u] = true
				if !announced[u] {
					logger.Error(nil, "GPU is lost", "gpu", u)
					b.Inject(Event{UUID: u, Kind: EventLost})
				}
			}
			announced = now
			if !sleep(backoff) {
				return
			}
			backoff = min(2*backoff, lostBackoffMax)
			continue
		case gonvml.SUCCESS:
			if r.uuid != "" {
				b.Inject(Event{UUID: r.uuid, Kind: EventXID, XID: r.xid})
			}
		}
		backoff = lostBackoffMin
	}
}

func (b *Backend) watchNVML(ctx context.Context) {
	logger := klog.FromContext(ctx)
	es, ret := b.Lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		logger.Error(nil, "NVML event set unavailable, no XID health events", "ret", gonvml.ErrorString(ret))
		return
	}
	defer es.Free()
	n, _ := b.Lib.DeviceGetCount()
	var uuids []string
	for i := 0; i < n; i++ {
		d, ret := b.Lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		if u, ret := d.GetUUID(); ret == gonvml.SUCCESS {
			uuids = append(uuids, u)
		}
		if ret := d.RegisterEvents(gonvml.EventTypeXidCriticalError, es); ret != gonvml.SUCCESS {
			logger.Info("XID events not supported", "index", i, "ret", gonvml.ErrorString(ret))
		}
	}
	wait := func() waitResult {
		data, ret := es.Wait(1000)
		if ret != gonvml.SUCCESS || data.EventType != gonvml.EventTypeXidCriticalError {
			return waitResult{ret: ret}
		}
		u, _ := data.Device.GetUUID()
		return waitResult{uuid: u, xid: data.EventData, ret: ret}
	}
	lostGPUs := func() []string {
		var out []string
		for _, u := range uuids {
			if err := b.Probe(ctx, u); errors.Is(err, ErrGPULost) {
				out = append(out, u)
			}
		}
		return out
	}
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	b.eventLoop(ctx, wait, lostGPUs, sleep)
}
