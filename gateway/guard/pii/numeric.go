package pii

import "strings"

// numericEntity tags the recognizer that reports the numeric types (phone, card, SSN, IPv4)
// from one scan of digit runs.
const numericEntity Entity = "_numeric"

// numericRec finds runs of digit groups joined by short separators ("+1 (415) 555-2671",
// "4111 1111 1111 1111", "10.0.0.1") and classifies windows of consecutive groups, longest first,
// as an IPv4 address, a card number, an SSN or a phone number, in that order of precedence.
type numericRec struct {
	// regions are the regions whose national phone formats are validated.
	regions []phoneRegion
	// minScore is the detector's: phone candidates that cannot reach it are not validated.
	minScore float64
	// noPhones is set when the detector does not report phone numbers: windows are not
	// classified as phones (nor validated) at all.
	noPhones bool
}

func (numericRec) entity() Entity { return numericEntity }

// maxRunGroups bounds the groups examined in one run (a table of numbers is not one value).
const maxRunGroups = 64

type group struct{ start, end int }

func isNumSep(c byte) bool {
	return c == ' ' || c == '-' || c == '.' || c == '/' || c == '(' || c == ')'
}

func (r numericRec) find(text string, out []Finding) []Finding {
	ps := &phoneScan{regions: r.regions, minScore: r.minScore, budget: phoneValidations + len(text)/validationBytes, off: r.noPhones}
	for i := 0; i < len(text); {
		c := text[i]
		lead := (c == '+' || c == '(') && i+1 < len(text) && isDigit(text[i+1])
		if !(isDigit(c) || lead) || !boundaryBefore(text, i) {
			i++
			continue
		}
		groups, end := scanRun(text, i)
		if boundaryAfter(text, end) {
			out = classifyRun(ps, text, groups, out)
		}
		i = end + 1
	}
	return out
}

// scanRun returns the digit groups of the run starting at i and the end of its last group.
func scanRun(text string, i int) ([]group, int) {
	var groups []group
	j := i
	if !isDigit(text[j]) {
		j++
	}
	for len(groups) < maxRunGroups {
		s := j
		for j < len(text) && isDigit(text[j]) {
			j++
		}
		groups = append(groups, group{s, j})
		// Up to two separator bytes may join this group to the next ("-", ") ", " (").
		k := j
		for k < len(text) && k-j < 2 && isNumSep(text[k]) {
			k++
		}
		if k == j || k >= len(text) || !isDigit(text[k]) {
			break
		}
		j = k
	}
	return groups, groups[len(groups)-1].end
}

// classifyRun appends the values found in one run, trying windows of groups longest first.
func classifyRun(ps *phoneScan, text string, groups []group, out []Finding) []Finding {
	for g := 0; g < len(groups); {
		found := false
		for h := len(groups) - 1; h >= g; h-- {
			if f, ok := classify(ps, text, groups, g, h); ok {
				out = append(out, f)
				g = h + 1
				found = true
				break
			}
		}
		if !found {
			g++
		}
	}
	return out
}

// window describes groups[g..h] of a run.
type window struct {
	start, end int      // span in text, including a leading '+' or '('
	digits     string   // the digits only
	lens       []int    // digits per group
	seps       []string // separators between consecutive groups
	plus       bool     // starts with '+'
	paren      bool     // first group is in parentheses
	before     byte     // the separator byte just outside the window, or 0
	after      byte
	prevLen    int // digits of the group before the window (0: none)
	nextLen    int // digits of the group after the window (0: none)
}

func makeWindow(text string, groups []group, g, h int) window {
	w := window{start: groups[g].start, end: groups[h].end}
	if w.start > 0 && text[w.start-1] == '+' {
		w.start--
		w.plus = true
	} else if w.start > 0 && text[w.start-1] == '(' {
		w.start--
		w.paren = true
	}
	var d strings.Builder
	for k := g; k <= h; k++ {
		d.WriteString(text[groups[k].start:groups[k].end])
		w.lens = append(w.lens, groups[k].end-groups[k].start)
		if k > g {
			w.seps = append(w.seps, text[groups[k-1].end:groups[k].start])
		}
	}
	w.digits = d.String()
	if g > 0 {
		w.before = text[groups[g].start-1]
		w.prevLen = groups[g-1].end - groups[g-1].start
	}
	if h < len(groups)-1 {
		w.after = text[groups[h].end]
		w.nextLen = groups[h+1].end - groups[h+1].start
	}
	return w
}

// sameSeps reports whether every separator equals one of allowed (and all are equal).
func (w window) sameSeps(allowed ...string) bool {
	for i, s := range w.seps {
		if i > 0 && s != w.seps[0] {
			return false
		}
		ok := false
		for _, a := range allowed {
			ok = ok || s == a
		}
		if !ok {
			return false
		}
	}
	return true
}

func classify(ps *phoneScan, text string, groups []group, g, h int) (Finding, bool) {
	w := makeWindow(text, groups, g, h)
	n := len(w.digits)
	if n > 19 {
		return Finding{}, false
	}
	if f, ok := ipv4(text, w); ok {
		return f, true
	}
	if f, ok := card(text, w); ok {
		return f, true
	}
	if f, ok := ssn(text, w); ok {
		return f, true
	}
	return ps.phone(text, w)
}

var ipContext = []string{"ip", "address", "host", "server", "addr"}

func ipv4(text string, w window) (Finding, bool) {
	if len(w.lens) != 4 || !w.sameSeps(".") || w.before == '.' || w.after == '.' || w.plus || w.paren {
		return Finding{}, false
	}
	pos := 0
	for _, l := range w.lens {
		oct := w.digits[pos : pos+l]
		pos += l
		if l > 3 || l > 1 && oct[0] == '0' || atoi(oct) > 255 {
			return Finding{}, false
		}
	}
	return Finding{Entity: IPAddress, Start: w.start, End: w.end, Score: boosted(text, w.start, 0.6, ipContext), Kind: "ipv4"}, true
}

func allSame(d string) bool { return strings.Count(d, d[:1]) == len(d) }

var ssnContext = []string{"ssn", "social security", "social-security", "ss#", "ss #", "taxpayer"}

func ssn(text string, w window) (Finding, bool) {
	var score float64
	switch {
	case len(w.lens) == 3 && w.lens[0] == 3 && w.lens[1] == 2 && w.lens[2] == 4 && w.sameSeps("-"):
		score = 0.85
	case len(w.lens) == 3 && w.lens[0] == 3 && w.lens[1] == 2 && w.lens[2] == 4 && w.sameSeps(" "):
		score = 0.6
	case len(w.lens) == 1 && w.lens[0] == 9:
		score = 0.3
	default:
		return Finding{}, false
	}
	if w.plus || w.paren || w.before == '-' || w.after == '-' || !ssnAllocatable(w.digits) {
		return Finding{}, false
	}
	return Finding{Entity: USSSN, Start: w.start, End: w.end, Score: boosted(text, w.start, score, ssnContext)}, true
}

// ssnAllocatable applies the SSA's rules: area 001-665 or 667-899, group 01-99, serial
// 0001-9999; well-known advertising and example numbers are excluded.
func ssnAllocatable(d string) bool {
	area, grp, serial := atoi(d[:3]), atoi(d[3:5]), atoi(d[5:])
	if area == 0 || area == 666 || area >= 900 || grp == 0 || serial == 0 {
		return false
	}
	switch d {
	case "078051120", "219099999", "123456789":
		return false
	}
	return true
}
