package pii

import "strings"

// emailRec finds e-mail addresses: every '@' is expanded to the longest local part and domain
// around it, then checked (RFC 5321 lengths, dot rules, LDH labels, an alphabetic TLD).
type emailRec struct{}

func (emailRec) entity() Entity { return Email }

func isLocalChar(c byte) bool {
	return isAlnum(c) || strings.IndexByte("._%+-'", c) >= 0
}

func isDomainChar(c byte) bool { return isAlnum(c) || c == '.' || c == '-' }

func (emailRec) find(text string, out []Finding) []Finding {
	for off := 0; ; {
		k := strings.IndexByte(text[off:], '@')
		if k < 0 {
			return out
		}
		at := off + k
		off = at + 1
		start := at
		for start > 0 && at-start < 64 && isLocalChar(text[start-1]) && !(text[start-1] == '.' && text[start] == '.') {
			start--
		}
		// A local part never starts with a dot or quote: trim them (they belong to the sentence).
		for start < at && (text[start] == '.' || text[start] == '\'') {
			start++
		}
		end := at + 1
		for end < len(text) && end-at <= 255 && isDomainChar(text[end]) {
			end++
		}
		// Trailing dots and hyphens end the sentence, not the domain.
		for end > at+1 && (text[end-1] == '.' || text[end-1] == '-') {
			end--
		}
		if start == at || !boundaryBefore(text, start) && text[start-1] != '.' {
			continue
		}
		if !validLocal(text[start:at]) || !validDomain(text[at+1:end]) {
			continue
		}
		out = append(out, Finding{Entity: Email, Start: start, End: end, Score: 1})
		off = end
	}
}

func validLocal(s string) bool {
	return len(s) > 0 && len(s) <= 64 && s[len(s)-1] != '.' && !strings.Contains(s, "..")
}

func validDomain(s string) bool {
	if len(s) < 4 || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
		return false
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
	}
	tld := labels[len(labels)-1]
	if len(tld) < 2 {
		return false
	}
	for i := 0; i < len(tld); i++ {
		if !isAlpha(tld[i]) {
			return false
		}
	}
	return true
}
