package scalepolicy

import (
	"time"

	"github.com/robfig/cron/v3"
)

// cronLookback is how far back the first evaluation looks for a schedule's last firing.
const cronLookback = 8 * 24 * time.Hour

type cronState struct {
	s     Schedule
	sched cron.Schedule
	// last is the latest firing <= the last evaluated time; next the one after it.
	last, next time.Time
}

func newCronState(s Schedule) (*cronState, error) {
	sc, err := cron.ParseStandard(s.Cron)
	if err != nil {
		return nil, err
	}
	return &cronState{s: s, sched: sc}, nil
}

// advance moves last/next so that last <= now < next.
func (c *cronState) advance(now time.Time) {
	now = now.UTC()
	if c.next.IsZero() || now.Before(c.last) {
		c.last = time.Time{}
		c.next = c.sched.Next(now.Add(-cronLookback))
	}
	for !c.next.IsZero() && !c.next.After(now) {
		c.last, c.next = c.next, c.sched.Next(c.next)
	}
}

// scheduleFloor returns the replicas of the schedule that fired most recently
// (each schedule holds until another one fires), or 0 if none has fired within
// the lookback.
func (a *Autoscaler) scheduleFloor(now time.Time) (int32, string) {
	var best *cronState
	for _, c := range a.crons {
		c.advance(now)
		if c.last.IsZero() {
			continue
		}
		if best == nil || c.last.After(best.last) {
			best = c
		}
	}
	if best == nil {
		return 0, ""
	}
	return best.s.Replicas, best.s.Name
}
