package state

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// Sleep is a hook that pauses a prepare (for crash tests), honoring cancellation.
func Sleep(d time.Duration) func(ctx context.Context, uid string) {
	return func(ctx context.Context, uid string) {
		klog.FromContext(ctx).Info("Pausing prepare (debug hook)", "uid", uid, "duration", d)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}
