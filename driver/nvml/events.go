package nvml

import (
	"context"
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

func (b *Backend) watchNVML(ctx context.Context) {
	logger := klog.FromContext(ctx)
	es, ret := b.Lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		logger.Error(nil, "NVML event set unavailable, no XID health events", "ret", gonvml.ErrorString(ret))
		return
	}
	defer es.Free()
	n, _ := b.Lib.DeviceGetCount()
	for i := 0; i < n; i++ {
		d, ret := b.Lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		if ret := d.RegisterEvents(gonvml.EventTypeXidCriticalError, es); ret != gonvml.SUCCESS {
			logger.Info("XID events not supported", "index", i, "ret", gonvml.ErrorString(ret))
		}
	}
	for ctx.Err() == nil {
		data, ret := es.Wait(1000)
		if ret == gonvml.ERROR_TIMEOUT {
			continue
		}
		if ret == gonvml.ERROR_GPU_IS_LOST {
			logger.Error(nil, "A GPU is lost")
			continue
		}
		if ret != gonvml.SUCCESS || data.EventType != gonvml.EventTypeXidCriticalError {
			continue
		}
		u, _ := data.Device.GetUUID()
		b.Inject(Event{UUID: u, Kind: EventXID, XID: data.EventData})
	}
}
