package pii

import (
	"net/netip"
	"strings"
)

// ipv6Rec finds IPv6 addresses: every run of hex digits, colons and dots that holds a "::" or at
// least seven colons, on word boundaries, and parses as IPv6 (IPv4-mapped forms included).
type ipv6Rec struct{}

func (ipv6Rec) entity() Entity { return IPAddress }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func (ipv6Rec) find(text string, out []Finding) []Finding {
	for off := 0; ; {
		k := strings.IndexByte(text[off:], ':')
		if k < 0 {
			return out
		}
		c := off + k
		start := c
		for start > 0 && (isHex(text[start-1]) || text[start-1] == ':') {
			start--
		}
		end := c
		for end < len(text) && (isHex(text[end]) || text[end] == ':' || text[end] == '.' && end+1 < len(text) && isDigit(text[end+1])) {
			end++
		}
		off = end
		if end == c+1 && start == c {
			off = c + 1
			continue
		}
		cand := text[start:end]
		if !boundaryBefore(text, start) || !boundaryAfter(text, end) {
			continue
		}
		if !strings.Contains(cand, "::") && strings.Count(cand, ":") < 7 {
			continue
		}
		if cand == "::" || strings.Trim(cand, ":") == "" {
			continue
		}
		a, err := netip.ParseAddr(cand)
		if err != nil || !a.Is6() {
			continue
		}
		out = append(out, Finding{Entity: IPAddress, Start: start, End: end, Score: boosted(text, start, 0.6, ipContext), Kind: "ipv6"})
	}
}
