package kvevents

import "testing"

// BenchmarkDecodeBatch decodes the BlockStored event of a 10,000-token prompt in 16-token blocks
// (625 hashes, 10,000 token ids), as the gateway decodes every pod's events.
func BenchmarkDecodeBatch(b *testing.B) {
	e := Event{Kind: TagBlockStored, BlockSize: 16, Parent: IntHash(7)}
	for i := range 625 {
		e.Hashes = append(e.Hashes, IntHash(uint64(i)*0x9e3779b97f4a7c15))
	}
	for i := range 10000 {
		e.TokenIDs = append(e.TokenIDs, uint32(i*31%50000))
	}
	p, err := EncodeBatch(Batch{TS: 1, Events: []Event{e}, DPRank: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		got, err := DecodeBatch(p)
		if err != nil || len(got.Events) != 1 || len(got.Events[0].Hashes) != 625 || len(got.Events[0].TokenIDs) != 10000 {
			b.Fatalf("%v %+v", err, got)
		}
	}
}
