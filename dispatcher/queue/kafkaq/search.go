package kafkaq

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// published reports whether topic holds a record with the publish id at or after since: every
// partition is read from the first offset at since to its end at the time of the call.
func (p *publisher) published(ctx context.Context, topic, id string, since time.Time) (bool, error) {
	starts, err := p.adm.ListOffsetsAfterMilli(ctx, since.UnixMilli(), topic)
	if err != nil {
		return false, fmt.Errorf("list offsets after %s: %w", since.Format(time.RFC3339), err)
	}
	ends, err := p.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return false, fmt.Errorf("list end offsets: %w", err)
	}
	want := map[int32]kgo.Offset{}
	stop := map[int32]int64{}
	for part, lo := range starts[topic] {
		if lo.Err != nil {
			return false, lo.Err
		}
		hi := ends[topic][part]
		if hi.Err != nil {
			return false, hi.Err
		}
		if lo.Offset < hi.Offset {
			want[part] = kgo.NewOffset().At(lo.Offset)
			stop[part] = hi.Offset
		}
	}
	if len(want) == 0 {
		return false, nil
	}
	cl, err := kgo.NewClient(append(slices.Clip(p.opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}))...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	for len(stop) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		found := false
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := stop[r.Partition]; ok && r.Offset >= end-1 {
				delete(stop, r.Partition)
			}
			for _, h := range r.Headers {
				if h.Key == HeaderPublishID && string(h.Value) == id {
					found = true
				}
			}
		})
		if found {
			return true, nil
		}
		for _, e := range fs.Errors() {
			return false, e.Err
		}
	}
	return false, nil
}
