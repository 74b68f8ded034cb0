package pick

import (
	"testing"
	"time"
)

func TestScraperLookup(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	sc := &Scraper{Interval: time.Second, Now: func() time.Time { return now }}
	sc.Set("fresh", ServerMetrics{At: now, Waiting: 3})
	sc.Set("stale-nocache", ServerMetrics{At: now.Add(-10 * time.Second), HasCacheConfig: true, PrefixCaching: false})
	sc.Set("caching", ServerMetrics{At: now, HasCacheConfig: true, PrefixCaching: true})
	for _, tc := range []struct {
		url                   string
		wantFresh, wantNoCach bool
		wantWaiting           float64
	}{
		{url: "fresh", wantFresh: true, wantWaiting: 3},
		{url: "stale-nocache", wantNoCach: true}, // a stale sample still says the engine does not cache
		{url: "caching", wantFresh: true},
		{url: "unknown"},
		{url: ""},
	} {
		m, fresh, noCache := sc.Lookup(tc.url)
		if fresh != tc.wantFresh || noCache != tc.wantNoCach || m.Waiting != tc.wantWaiting {
			t.Errorf("%q: fresh %v noCache %v waiting %v; want %v %v %v", tc.url, fresh, noCache, m.Waiting, tc.wantFresh, tc.wantNoCach, tc.wantWaiting)
		}
		if g, ok := sc.Get(tc.url); ok != fresh || g != m {
			t.Errorf("%q: Get disagrees with Lookup", tc.url)
		}
		if sc.NoPrefixCaching(tc.url) != noCache {
			t.Errorf("%q: NoPrefixCaching disagrees with Lookup", tc.url)
		}
	}
	var nilScraper *Scraper
	if _, fresh, noCache := nilScraper.Lookup("fresh"); fresh || noCache {
		t.Error("a nil scraper reports metrics")
	}
}
